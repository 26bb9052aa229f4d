// Claude Agent SDK integration (@anthropic-ai/claude-agent-sdk): make every turn of a query()
// session rewindable through rewindfs, including what the agent's shell commands did.
//
// The SDK is not imported here (no runtime dependency): these functions only build options,
// hooks and stream-json user messages in the shapes the SDK takes (checked against
// @anthropic-ai/claude-agent-sdk 0.3.330, see tests/clients/versions.env).
//
// Race-freedom, the same three rules as the Python adapter (rewindfs.claude):
// - sendPrompt() chooses the user message's uuid and begins its checkpoint *before* the
//   message is handed to the SDK (a `uuid` on a streamed user message becomes that message's
//   uuid), so no tool call runs ahead of its checkpoint;
// - the tool-span hooks are SDK callbacks, which the CLI awaits before the tool runs;
// - registerCli() wraps `spawnClaudeCodeProcess`: the spawned CLI's pid is registered as the
//   agent before the CLI can read its first line of input (its stdin is held until the daemon
//   has answered), so its own writes are `tool` and its children's `shell` from the start.
import { spawn as nodeSpawn } from "node:child_process";
import nodePath from "node:path";
import { randomUUID } from "node:crypto";
import { PassThrough } from "node:stream";

import { RewindfsError } from "./index.js";

/** How long the CLI's stdin is held waiting for the daemon to register it. */
const REGISTER_TIMEOUT_MS = 10_000;

function warn(message) {
  process.emitWarning(message, { code: "REWINDFS_CLAUDE" });
}

/** The file a tool call names (Write/Edit: file_path, NotebookEdit: notebook_path). */
export function fileOf(toolInput) {
  if (!toolInput || typeof toolInput !== "object") return undefined;
  for (const k of ["file_path", "notebook_path", "path"]) {
    const v = toolInput[k];
    if (typeof v === "string" && v) return v;
  }
  return undefined;
}

/**
 * SDK hook callbacks that report tool spans to the daemon, keyed by hook event. A span opens at
 * PreToolUse and closes at PostToolUse or PostToolUseFailure. A tool that the CLI refuses
 * after PreToolUse (Edit of a symlink) gets neither: its span is closed at the next
 * PreToolUse (the CLI runs tools that write one at a time), at UserPromptSubmit and at
 * Stop/StopFailure, so that later shell writes to its file are not taken for the tool's.
 * The callbacks never block the agent: a daemon error becomes a process warning.
 * `sessionId`: the session the spans are of (the id given to sendPrompt; the hooks' own
 * session_id is the CLI's). Without it a span belongs to whichever session began a message
 * last, which is right only while one session works in the workspace.
 */
export function toolSpanHooks(rw, { sessionId } = {}) {
  const open = new Map(); // tool_use_id -> tool_name, spans opened and not yet closed
  let warned = false;
  const report = async (phase, toolName, id, file) => {
    try {
      await rw.toolUse(phase, toolName, id, file, sessionId);
    } catch (e) {
      if (!warned) warn(`rewindfs: tool span not reported (${e?.message ?? e}); the tool runs anyway`);
      warned = true;
    }
  };
  const idOf = (input, toolUseID) => toolUseID || input?.tool_use_id || `hook-${input?.tool_name ?? ""}`;
  const closeAll = async () => {
    for (const [id, name] of [...open]) {
      open.delete(id);
      await report("post", name, id);
    }
  };
  const pre = async (input, toolUseID) => {
    await closeAll();
    const id = idOf(input, toolUseID);
    const name = String(input?.tool_name ?? "");
    open.set(id, name);
    await report("pre", name, id, fileOf(input?.tool_input));
    return {};
  };
  const post = async (input, toolUseID) => {
    const id = idOf(input, toolUseID);
    open.delete(id);
    await report("post", String(input?.tool_name ?? ""), id, fileOf(input?.tool_input));
    return {};
  };
  const end = async () => {
    await closeAll();
    return {};
  };
  return {
    PreToolUse: [{ hooks: [pre] }],
    PostToolUse: [{ hooks: [post] }],
    PostToolUseFailure: [{ hooks: [post] }],
    UserPromptSubmit: [{ hooks: [end] }],
    Stop: [{ hooks: [end] }],
    StopFailure: [{ hooks: [end] }],
  };
}

/** Spawns the CLI the way the SDK's own local spawn does (stdio piped, stderr to `stderr`). */
function spawnLocal(o, stderr) {
  const child = nodeSpawn(o.command, o.args, {
    cwd: o.cwd,
    env: o.env,
    signal: o.signal,
    stdio: ["pipe", "pipe", "pipe"],
    windowsHide: true,
  });
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (d) => stderr?.(d)); // also drains it when no one listens
  child.stderr.on("error", () => {});
  return child;
}

/** A SpawnedProcess whose stdin reaches `child` only once `ready` has settled. */
function heldUntil(child, ready) {
  const stdin = new PassThrough();
  // The SDK listens for errors on the stdin it was given (a CLI that exited): pass them on.
  child.stdin.on("error", (e) => {
    if (stdin.listenerCount("error") > 0) stdin.emit("error", e);
  });
  ready.finally(() => stdin.pipe(child.stdin));
  const self = {
    stdin,
    get stdout() {
      return child.stdout;
    },
    get pid() {
      return child.pid;
    },
    get killed() {
      return child.killed;
    },
    get exitCode() {
      return child.exitCode;
    },
    get signalCode() {
      return child.signalCode;
    },
    kill: (signal) => child.kill(signal),
    on: (event, listener) => (child.on(event, listener), self),
    once: (event, listener) => (child.once(event, listener), self),
    off: (event, listener) => (child.off(event, listener), self),
  };
  return self;
}

/**
 * Warns when the daemon sees the CLI `pid` underneath its mount (its cwd is the directory the
 * mount covers: nothing it changes is recorded). A status that cannot be read says nothing.
 */
async function warnIfUnderneath(rw, pid) {
  let st;
  try {
    st = await rw.status();
  } catch {
    return;
  }
  // Its cwd (or root) underneath: every relative path it uses misses the mount. (An open file
  // it inherited there, a log the host writes, is not the CLI's work.)
  const under = (st?.unprotectedProcesses ?? []).find((p) => p.pid === pid && (p.holds === "cwd" || p.holds === "root"));
  if (under) {
    warn(
      `rewindfs: the Claude Code CLI (pid ${pid}) works in ${under.path}, the directory underneath the mount at ${st.workspace}: nothing it changes is recorded; give the options an absolute cwd inside the mount (withRewindfs does)`,
    );
  }
}

/**
 * Returns a copy of `options` whose `spawnClaudeCodeProcess` registers the spawned CLI's pid
 * with the daemon as the agent (its own writes are `tool`, its children's `shell`). The CLI's
 * stdin is held until the daemon has answered, so not even the SDK's initialize request, let
 * alone a prompt, reaches the CLI before it is registered. A `spawnClaudeCodeProcess` already
 * in `options` is kept and wrapped; if it returns no `pid` (a CLI in a VM or container), the
 * CLI is not registered (tool spans still work) and a warning says so. `onRegistered(pid)` is
 * called once the daemon knows the pid.
 */
export function registerCli(options, rw, { onRegistered, sessionId } = {}) {
  const base = options ?? {};
  const custom = base.spawnClaudeCodeProcess;
  const spawnClaudeCodeProcess = (spawnOptions) => {
    const child = custom ? custom(spawnOptions) : spawnLocal(spawnOptions, base.stderr);
    const pid = child?.pid;
    if (typeof pid !== "number" || pid <= 0) {
      warn("rewindfs: spawnClaudeCodeProcess returned no pid: the CLI is not registered as the agent");
      return child;
    }
    let timer;
    const timeout = new Promise((_, fail) => {
      timer = setTimeout(() => fail(new RewindfsError(`no answer in ${REGISTER_TIMEOUT_MS} ms`)), REGISTER_TIMEOUT_MS);
      timer.unref?.();
    });
    const ready = Promise.race([rw.registerAgent(pid, sessionId), timeout])
      .then(() => {
        // Not awaited: a warning only, and the CLI's stdin is held meanwhile.
        void warnIfUnderneath(rw, pid);
        try {
          onRegistered?.(pid);
        } catch (e) {
          warn(`rewindfs: onRegistered(${pid}) threw: ${e?.message ?? e}`);
        }
      })
      .catch((e) => warn(`rewindfs: the CLI (pid ${pid}) was not registered as the agent: ${e?.message ?? e}`))
      .finally(() => clearTimeout(timer));
    return heldUntil(child, ready);
  };
  return { ...base, spawnClaudeCodeProcess };
}

/**
 * Returns a copy of the SDK's `options` with rewindfs's tool-span hooks added (hooks already
 * there are kept and run too; their spans are `sessionId`'s) and the CLI registered as the
 * agent, of `sessionId`, when it is spawned (see registerCli; `{ registerCli: false }` leaves
 * `spawnClaudeCodeProcess` alone). Its `cwd` becomes an absolute path (the host's cwd when
 * none is set): a path is looked up afresh when the CLI starts, and so reaches the mount even
 * when the host process was started inside the directory before it was mounted (its own cwd
 * is then the directory underneath, where nothing is recorded).
 */
export function withRewindfs(options, rw, { registerCli: register = true, onRegistered, sessionId } = {}) {
  const base = options ?? {};
  const hooks = {};
  for (const [event, matchers] of Object.entries(base.hooks ?? {})) hooks[event] = [...(matchers ?? [])];
  for (const [event, matchers] of Object.entries(toolSpanHooks(rw, { sessionId }))) (hooks[event] ??= []).push(...matchers);
  const out = { ...base, hooks, cwd: nodePath.resolve(base.cwd ?? process.cwd()) };
  return register ? registerCli(out, rw, { onRegistered, sessionId }) : out;
}

/**
 * Streaming input for query({ prompt }): an async iterable of user messages that stays open
 * until end(), so one CLI process serves many turns. (Query.streamInput() is no substitute:
 * it closes the CLI's stdin when its iterable ends.)
 */
export class PromptStream {
  #queue = [];
  #wake = null;
  #ended = false;
  /** uuids already sent: the CLI silently drops a message whose uuid it has seen. */
  sent = new Set();

  push(message) {
    if (this.#ended) throw new RewindfsError("the prompt stream has ended");
    this.#queue.push(message);
    this.#wake?.();
  }

  /** No more prompts: the SDK closes the CLI's stdin once the last turn is done. */
  end() {
    this.#ended = true;
    this.#wake?.();
  }

  async *[Symbol.asyncIterator]() {
    for (;;) {
      while (this.#queue.length) yield this.#queue.shift();
      if (this.#ended) return;
      await new Promise((resolve) => {
        this.#wake = resolve;
      });
      this.#wake = null;
    }
  }
}

/**
 * Begins the checkpoint of a new user message, then sends it with that uuid. Resolves to the
 * uuid: pass it to `rw.rewindFiles()` (or the SDK's `rewindFiles()`) to go back to the state
 * before this turn. Send a prompt only once the previous turn's `result` has arrived: a
 * prompt sent while a turn runs is absorbed into that turn and gets no checkpoint of its own
 * in the CLI. A uuid is never reused (the CLI would drop the message and never answer).
 */
export async function sendPrompt(prompts, rw, sessionId, text, { uuid } = {}) {
  const u = uuid ?? randomUUID();
  if (prompts.sent?.has(u)) throw new RewindfsError(`uuid ${u} was already sent: the CLI would drop the message`);
  await rw.beginMessage(sessionId, u);
  prompts.sent?.add(u);
  prompts.push({
    type: "user",
    message: { role: "user", content: text },
    parent_tool_use_id: null,
    session_id: sessionId,
    uuid: u,
  });
  return u;
}

/**
 * The messages of one turn, up to and including its `result`, without closing the query (a
 * `break` out of `for await (const m of q)` would end the whole session).
 */
export async function* receiveResponse(q) {
  for (;;) {
    const { value, done } = await q.next();
    if (done) return;
    yield value;
    if (value?.type === "result") return;
  }
}
