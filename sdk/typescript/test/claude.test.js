// The Claude Agent SDK adapter without the SDK or a daemon: a recording stand-in for the
// client, real child processes for the spawn wrapper. (tests/clients/test_rewindfs_real.py
// runs it with the real SDK and CLI through a real mount.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";

import { RewindfsError } from "../index.js";
import { PromptStream, fileOf, receiveResponse, registerCli, sendPrompt, toolSpanHooks, withRewindfs } from "../claude.js";

/** Records every request; `registerAgent` resolves when `release()` is called. */
function recorder() {
  const calls = [];
  let release;
  const registered = new Promise((r) => {
    release = r;
  });
  return {
    calls,
    release: () => release(),
    async toolUse(phase, toolName, id, file) {
      calls.push(["tool_use", phase, toolName, id, file]);
      return {};
    },
    async beginMessage(session, uuid) {
      calls.push(["begin_message", session, uuid]);
      return { checkpoint: uuid };
    },
    async registerAgent(pid) {
      calls.push(["register_agent", pid]);
      await registered;
      return {};
    },
  };
}

const run = (matchers, input, id) => Promise.all(matchers.map((m) => m.hooks[0](input, id, { signal: new AbortController().signal })));

test("tool spans open at PreToolUse and close at PostToolUse and PostToolUseFailure", async () => {
  const rw = recorder();
  const h = toolSpanHooks(rw);
  const write = { hook_event_name: "PreToolUse", tool_name: "Write", tool_input: { file_path: "/p/a.txt", content: "x" } };
  assert.deepEqual(await run(h.PreToolUse, write, "toolu_1"), [{}]);
  await run(h.PostToolUse, { ...write, hook_event_name: "PostToolUse" }, "toolu_1");
  await run(h.PreToolUse, { tool_name: "Bash", tool_input: { command: "false" } }, "toolu_2");
  await run(h.PostToolUseFailure, { tool_name: "Bash", tool_input: { command: "false" } }, "toolu_2");
  await run(h.Stop, { hook_event_name: "Stop" }, "random");
  assert.deepEqual(rw.calls, [
    ["tool_use", "pre", "Write", "toolu_1", "/p/a.txt"],
    ["tool_use", "post", "Write", "toolu_1", "/p/a.txt"],
    ["tool_use", "pre", "Bash", "toolu_2", undefined],
    ["tool_use", "post", "Bash", "toolu_2", undefined],
  ]);
});

test("a span a refused tool left open is closed at the next PreToolUse, UserPromptSubmit or Stop", async () => {
  for (const closer of ["PreToolUse", "UserPromptSubmit", "Stop", "StopFailure"]) {
    const rw = recorder();
    const h = toolSpanHooks(rw);
    // Edit of a symlink: PreToolUse, then neither PostToolUse nor PostToolUseFailure.
    await run(h.PreToolUse, { tool_name: "Edit", tool_input: { file_path: "/p/link.txt" } }, "toolu_edit");
    await run(h[closer], { tool_name: "Bash", tool_input: { command: "echo >> link.txt" } }, "toolu_bash");
    assert.deepEqual(rw.calls.slice(0, 2), [
      ["tool_use", "pre", "Edit", "toolu_edit", "/p/link.txt"],
      ["tool_use", "post", "Edit", "toolu_edit", undefined],
    ], closer);
  }
});

test("the file of a tool call is file_path or notebook_path", () => {
  assert.equal(fileOf({ file_path: "/a" }), "/a");
  assert.equal(fileOf({ notebook_path: "/n.ipynb", cell_id: "c" }), "/n.ipynb");
  assert.equal(fileOf({ command: "ls" }), undefined);
  assert.equal(fileOf(null), undefined);
});

test("withRewindfs keeps the hooks already there and adds its own after them", () => {
  const mine = async () => ({});
  const o = withRewindfs({ cwd: "/p", hooks: { PreToolUse: [{ matcher: "Bash", hooks: [mine] }] } }, recorder());
  assert.equal(o.cwd, "/p");
  assert.equal(o.hooks.PreToolUse.length, 2);
  assert.equal(o.hooks.PreToolUse[0].hooks[0], mine);
  for (const e of ["PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop", "StopFailure"]) assert.equal(o.hooks[e].length, 1, e);
  assert.equal(typeof o.spawnClaudeCodeProcess, "function");
  assert.equal(withRewindfs({}, recorder(), { registerCli: false }).spawnClaudeCodeProcess, undefined);
});

test("registerCli registers the spawned CLI's pid before the CLI reads a byte of input", async () => {
  const rw = recorder();
  const pids = [];
  const o = registerCli({}, rw, { onRegistered: (pid) => pids.push(pid) });
  // `cat` stands in for the CLI: it echoes what reaches its stdin.
  const child = o.spawnClaudeCodeProcess({ command: "cat", args: [], env: process.env, signal: new AbortController().signal });
  assert.ok(child.pid > 0);
  assert.deepEqual(rw.calls, [["register_agent", child.pid]]);
  let out = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (d) => {
    out += d;
  });
  child.stdin.write('{"type":"control_request"}\n');
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(out, "", "input reached the CLI before it was registered");
  rw.release();
  const exited = new Promise((r) => child.once("exit", r));
  await new Promise((r) => setTimeout(r, 100));
  child.stdin.end();
  await exited;
  assert.equal(out, '{"type":"control_request"}\n');
  assert.deepEqual(pids, [child.pid]);
  assert.equal(child.exitCode, 0);
});

test("registerCli wraps a custom spawnClaudeCodeProcess", async () => {
  const rw = recorder();
  rw.release();
  let spawned = 0;
  const custom = (so) => {
    spawned++;
    return spawn(so.command, so.args, { stdio: ["pipe", "pipe", "ignore"] });
  };
  const o = registerCli({ spawnClaudeCodeProcess: custom }, rw);
  const child = o.spawnClaudeCodeProcess({ command: "true", args: [], env: process.env, signal: new AbortController().signal });
  await new Promise((r) => child.once("exit", r));
  assert.equal(spawned, 1);
  assert.deepEqual(rw.calls, [["register_agent", child.pid]]);
});

test("sendPrompt begins the checkpoint before the prompt is streamed, and never reuses a uuid", async () => {
  const rw = recorder();
  const prompts = new PromptStream();
  const it = prompts[Symbol.asyncIterator]();
  const next = it.next();
  const u = await sendPrompt(prompts, rw, "s1", "Refactor utils.ts", { uuid: "11111111-2222-3333-4444-555555555555" });
  assert.equal(u, "11111111-2222-3333-4444-555555555555");
  assert.deepEqual(rw.calls, [["begin_message", "s1", u]]);
  assert.deepEqual((await next).value, {
    type: "user",
    message: { role: "user", content: "Refactor utils.ts" },
    parent_tool_use_id: null,
    session_id: "s1",
    uuid: u,
  });
  await assert.rejects(sendPrompt(prompts, rw, "s1", "again", { uuid: u }), RewindfsError);
  assert.equal(rw.calls.length, 1);
  const v = await sendPrompt(prompts, rw, "s1", "next");
  assert.match(v, /^[0-9a-f-]{36}$/);
  prompts.end();
  assert.equal((await it.next()).value.uuid, v);
  assert.equal((await it.next()).done, true);
});

test("receiveResponse stops after the turn's result and leaves the query open", async () => {
  async function* fakeQuery() {
    yield { type: "system" };
    yield { type: "assistant" };
    yield { type: "result" };
    yield { type: "assistant", turn: 2 };
    yield { type: "result", turn: 2 };
  }
  const q = fakeQuery();
  const first = [];
  for await (const m of receiveResponse(q)) first.push(m.type);
  assert.deepEqual(first, ["system", "assistant", "result"]);
  const second = [];
  for await (const m of receiveResponse(q)) second.push(m.turn);
  assert.deepEqual(second, [2, 2]);
});
