// Client for the rewindfs control socket (schema/protocol.md): one JSON object per line, in
// the Claude Agent SDK's control envelope. No runtime dependencies.
import { createConnection } from "node:net";
import { readFileSync } from "node:fs";
import { resolve, join, sep } from "node:path";

export class RewindfsError extends Error {
  /** `errno`: the errno of the system call that stopped the request, when the daemon names one. */
  constructor(message, errno) {
    super(message);
    this.name = "RewindfsError";
    this.errno = errno;
  }
}

function unescapeMountinfo(s) {
  return s.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
}

/** Finds the daemon's socket: explicit path, else $REWINDFS_SOCKET, else the deepest
 * `fuse.rewindfs` mount containing `cwd` (its mount source is the store directory). */
export function findSocket(socket, { cwd = process.cwd(), mountinfo } = {}) {
  if (socket) return socket;
  if (process.env.REWINDFS_SOCKET) return process.env.REWINDFS_SOCKET;
  const text = mountinfo ?? readFileSync("/proc/self/mountinfo", "utf8");
  const here = resolve(cwd);
  let best = null;
  for (const line of text.split("\n")) {
    const f = line.split(" ");
    const i = f.indexOf("-");
    if (i < 0 || f.length < i + 3 || f.length < 5 || f[i + 1] !== "fuse.rewindfs") continue;
    const mnt = unescapeMountinfo(f[4]);
    const src = unescapeMountinfo(f[i + 2]);
    if ((here === mnt || here.startsWith(mnt.endsWith(sep) ? mnt : mnt + sep)) && (!best || mnt.length >= best[0].length)) {
      best = [mnt, src];
    }
  }
  if (!best) throw new RewindfsError(`${here} is not inside a rewindfs mount; pass a socket or set REWINDFS_SOCKET`);
  return join(best[1], "control.sock");
}

function toResult(v) {
  const r = {
    canRewind: Boolean(v.canRewind),
    filesChanged: v.filesChanged ?? [],
    insertions: v.insertions ?? 0,
    deletions: v.deletions ?? 0,
    skippedLinks: v.skippedLinks ?? 0,
    conflicts: v.conflicts ?? [],
  };
  // rewindfs's additions, as the daemon gives them (absent: none).
  for (const k of ["error", "rewindId", "conflictsBy", "omitted", "changedMeanwhile", "partiallyRestored", "withheld", "attributeChanges"]) {
    if (v[k] !== undefined) r[k] = v[k];
  }
  return r;
}

export class RewindfsClient {
  #sock;
  #buf = "";
  #waiting = [];
  #next = 1;
  #closed = null;

  constructor(socketPath) {
    this.path = socketPath;
  }

  /** Connects to the daemon (`socket` as findSocket takes it). */
  static async connect(socket) {
    const c = new RewindfsClient(findSocket(socket));
    await new Promise((ok, fail) => {
      c.#sock = createConnection(c.path, ok);
      c.#sock.once("error", (e) => fail(new RewindfsError(`control socket ${c.path}: ${e.message}`)));
    });
    c.#sock.setEncoding("utf8");
    c.#sock.on("data", (d) => {
      c.#buf += d;
      let nl;
      while ((nl = c.#buf.indexOf("\n")) >= 0) {
        const line = c.#buf.slice(0, nl);
        c.#buf = c.#buf.slice(nl + 1);
        c.#waiting.shift()?.resolve(line);
      }
    });
    const fail = (e) => {
      c.#closed = e ?? new RewindfsError("the daemon closed the connection");
      for (const w of c.#waiting.splice(0)) w.reject(c.#closed);
    };
    c.#sock.on("error", fail);
    c.#sock.on("close", () => fail());
    return c;
  }

  /** Sends one request; resolves to the success payload, rejects with the daemon's error. */
  async request(subtype, fields = {}) {
    if (this.#closed) throw this.#closed;
    const request_id = `r${this.#next++}`;
    const request = { subtype };
    for (const [k, v] of Object.entries(fields)) if (v !== undefined && v !== null) request[k] = v;
    const line = await new Promise((resolve, reject) => {
      this.#waiting.push({ resolve, reject });
      this.#sock.write(JSON.stringify({ type: "control_request", request_id, request }) + "\n");
    });
    const r = JSON.parse(line).response ?? {};
    if (r.subtype === "success") return r.response ?? {};
    if (r.subtype === "error") throw new RewindfsError(r.error ?? "unknown error", r.errno);
    throw new RewindfsError(`unexpected response: ${line}`);
  }

  beginMessage(sessionId, userMessageId) {
    return this.request("begin_message", { session_id: sessionId, user_message_id: userMessageId });
  }
  toolUse(phase, toolName, toolUseId, filePath, sessionId) {
    return this.request("tool_use", { phase, tool_name: toolName, tool_use_id: toolUseId, file_path: filePath, session_id: sessionId });
  }
  /** Registers `pid` as an agent (of `sessionId`: its writes and its children's belong to it). */
  registerAgent(pid, sessionId) {
    return this.request("register_agent", { pid, session_id: sessionId });
  }
  async rewindFiles(userMessageId, { dryRun = false, scope = "tool", force = false, paths, sessionId, trustImported = false } = {}) {
    const v = await this.request("rewind_files", {
      user_message_id: userMessageId,
      dry_run: dryRun,
      scope,
      force,
      paths,
      session_id: sessionId,
      // Only when asked: what history from elsewhere would grant (withheld by default).
      trust_imported: trustImported || undefined,
    });
    return toResult(v);
  }
  undoRewind({ dryRun = false, force = false, sessionId } = {}) {
    return this.request("undo_rewind", { dry_run: dryRun, force, session_id: sessionId });
  }
  redoRewind({ dryRun = false, force = false, sessionId } = {}) {
    return this.request("redo_rewind", { dry_run: dryRun, force, session_id: sessionId });
  }
  async listCheckpoints(sessionId) {
    return (await this.request("list_checkpoints", { session_id: sessionId })).checkpoints;
  }
  async diff(userMessageId, path, scope) {
    return (await this.request("diff", { user_message_id: userMessageId, path, scope })).diff;
  }
  async log(path, limit) {
    return (await this.request("log", { path, limit })).entries;
  }
  status() {
    return this.request("status");
  }
  close() {
    this.#sock?.end();
  }
}

export { binaryPath } from "./binary.js";
