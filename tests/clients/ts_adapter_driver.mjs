#!/usr/bin/env node
// A TypeScript Claude Agent SDK session through rewindfs's TypeScript adapter
// (sdk/typescript/claude.js: withRewindfs, PromptStream, sendPrompt, receiveResponse), driven
// one command at a time by rewindfs_compare.py: one JSON object per line on stdin, one answer
// per line on stdout ({"ok": true, ...} or {"ok": false, "error": "..."}).
//
//   {"op": "start", "ws", "home", "base_url", "socket", "session_id", "resume"?}
//   {"op": "prompt", "text", "uuid"}          -> {"uuid", "echoed_uuid", "session_id"}
//   {"op": "rewind", "uuid", "dry_run"}       -> {"response"} (the SDK's own rewindFiles)
//   {"op": "restart"}                         -> a new CLI process resuming the session
//   {"op": "close"}
//
// The SDK comes from $REWINDFS_CLIENTS_DIR/npm (tests/clients/install.sh).
import { createRequire } from "node:module";
import path from "node:path";
import readline from "node:readline";

import { RewindfsClient } from "../../sdk/typescript/index.js";
import { PromptStream, receiveResponse, sendPrompt, withRewindfs } from "../../sdk/typescript/claude.js";

const here = path.dirname(new URL(import.meta.url).pathname);
const clientsDir = process.env.REWINDFS_CLIENTS_DIR || path.resolve(here, "../../target/clients");
const require = createRequire(path.join(clientsDir, "npm", "package.json"));
const { query } = await import(require.resolve("@anthropic-ai/claude-agent-sdk"));

let cfg = null; // the start command
let rw = null; // RewindfsClient
let q = null; // the running query
let prompts = null;
let sessionId = "";
let registered = [];
let stderrTail = "";

function start(resume) {
  prompts = new PromptStream();
  const options = {
    cwd: cfg.ws,
    permissionMode: "bypassPermissions",
    allowDangerouslySkipPermissions: true,
    enableFileCheckpointing: true,
    extraArgs: { "replay-user-messages": null },
    settingSources: ["project"],
    env: {
      ...process.env,
      HOME: cfg.home,
      ANTHROPIC_BASE_URL: cfg.base_url,
      ANTHROPIC_API_KEY: "sk-ant-fake-offline",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      DISABLE_AUTOUPDATER: "1",
      DISABLE_TELEMETRY: "1",
      DISABLE_ERROR_REPORTING: "1",
      IS_SANDBOX: "1",
    },
    stderr: (d) => {
      stderrTail = (stderrTail + d).slice(-4000);
    },
    ...(resume ? { resume } : {}),
  };
  q = query({
    prompt: prompts,
    options: withRewindfs(options, rw, {
      onRegistered: (pid) => registered.push(pid),
      // The session sendPrompt begins its checkpoints in: spans and the CLI are that session's.
      sessionId: cfg.rewindfs_session,
    }),
  });
}

async function stop() {
  if (!q) return;
  prompts.end();
  // Drain the query so that the CLI exits after its last turn (closing stdin ends it).
  const drain = (async () => {
    for (;;) {
      const { done } = await q.next();
      if (done) return;
    }
  })();
  await Promise.race([drain, new Promise((r) => setTimeout(r, 5000))]);
  q.close?.();
  q = null;
}

const ops = {
  async start(c) {
    cfg = c;
    sessionId = c.session_id || "";
    rw = await RewindfsClient.connect(c.socket);
    start(c.resume);
    return {};
  },
  async prompt(c) {
    const uuid = await sendPrompt(prompts, rw, cfg.rewindfs_session, c.text, { uuid: c.uuid });
    let echoed = null;
    for await (const m of receiveResponse(q)) {
      if (m.session_id) sessionId = m.session_id;
      if (m.type === "user" && typeof m.message?.content === "string" && !echoed) echoed = m.uuid;
    }
    return { uuid, echoed_uuid: echoed, session_id: sessionId, registered };
  },
  async rewind(c) {
    return { response: await q.rewindFiles(c.uuid, { dryRun: !!c.dry_run }) };
  },
  async restart() {
    await stop();
    start(sessionId);
    return { session_id: sessionId };
  },
  async close() {
    await stop();
    rw?.close();
    return {};
  },
};

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  const c = JSON.parse(line);
  let out;
  try {
    out = { ok: true, ...(await ops[c.op](c)) };
  } catch (e) {
    out = { ok: false, error: String(e?.message ?? e), stderr: stderrTail };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
  if (c.op === "close") break;
}
process.exit(0);
