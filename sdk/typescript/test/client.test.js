import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { RewindfsClient, RewindfsError, findSocket } from "../index.js";

const MOUNTINFO = "36 35 98:0 / /w/my\\040proj rw - fuse.rewindfs /st\\040ore rw\n38 35 0:1 / /proc rw - proc proc rw\n";

test("the socket is found like the CLI finds it", () => {
  const saved = process.env.REWINDFS_SOCKET;
  delete process.env.REWINDFS_SOCKET;
  try {
    assert.equal(findSocket("/x.sock"), "/x.sock");
    assert.equal(findSocket(undefined, { cwd: "/w/my proj/src", mountinfo: MOUNTINFO }), "/st ore/control.sock");
    assert.throws(() => findSocket(undefined, { cwd: "/w/my projX", mountinfo: MOUNTINFO }), RewindfsError);
  } finally {
    if (saved !== undefined) process.env.REWINDFS_SOCKET = saved;
  }
});

function daemon(t) {
  const bin = process.env.REWINDFS_BIN;
  const required = process.env.CI === "true" || process.env.CI === "1" || process.env.REQUIRE_FUSE === "1";
  const problem = !bin || !existsSync(bin) ? "REWINDFS_BIN is not set to a built rewindfs" : !existsSync("/dev/fuse") || process.getuid() !== 0 ? "/dev/fuse missing or not root" : null;
  if (problem) {
    if (required) assert.fail(`a real daemon is required (CI=true or REQUIRE_FUSE=1): ${problem}`);
    t.skip(problem);
    return null;
  }
  const tmp = mkdtempSync(join(tmpdir(), "rwfs-ts-"));
  const proj = join(tmp, "proj");
  const store = join(tmp, "store");
  execFileSync("mkdir", [proj]);
  execFileSync(bin, ["mount", proj, "--store", store]);
  t.after(() => execFileSync(bin, ["umount", proj]));
  return { proj, store, socket: join(store, "control.sock") };
}

test("rewindFiles returns the SDK's RewindFilesResult and rejects like the SDK", async (t) => {
  const d = daemon(t);
  if (!d) return;
  writeFileSync(join(d.proj, "keep.txt"), "v0\n");
  const c = await RewindfsClient.connect(d.socket);
  try {
    await c.registerAgent(process.pid);
    const turn = randomUUID();
    assert.equal((await c.beginMessage("ts", turn)).checkpoint, turn);
    writeFileSync(join(d.proj, "keep.txt"), "v1\n");
    writeFileSync(join(d.proj, "new.ts"), "export {}\n");
    const dry = await c.rewindFiles(turn, { dryRun: true });
    assert.equal(dry.canRewind, true);
    assert.deepEqual([...dry.filesChanged].sort(), [join(d.proj, "keep.txt"), join(d.proj, "new.ts")]);
    assert.equal(dry.deletions, 2);
    const real = await c.rewindFiles(turn);
    assert.equal(real.canRewind, true);
    assert.equal(real.skippedLinks, 0);
    assert.equal(readFileSync(join(d.proj, "keep.txt"), "utf8"), "v0\n");
    assert.equal(existsSync(join(d.proj, "new.ts")), false);
    const missing = randomUUID();
    assert.equal((await c.rewindFiles(missing, { dryRun: true })).error, "No file checkpoint found for this message.");
    await assert.rejects(c.rewindFiles(missing), { name: "RewindfsError", message: "No file checkpoint found for this message." });
    assert.ok((await c.listCheckpoints()).some((k) => k.uuid === turn));
    assert.ok((await c.status()).currentCheckpoint);
  } finally {
    c.close();
  }
});
