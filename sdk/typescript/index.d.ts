/** What an undo or redo changed (or, dry, would change); see schema/protocol.md. */
export interface StackResult {
  canRewind: boolean;
  error?: string;
  filesChanged: string[];
  insertions: number;
  deletions: number;
  /** Absolute paths someone other than rewindfs changed since (a forced one overwrote them). */
  conflicts: string[];
  /** Who changed each conflict: an actor, or `rewind` (another session's rewind, undo or redo). */
  conflictsBy?: Record<string, Array<"tool" | "shell" | "external" | "rewind">>;
  /** Absolute paths left as another process changed them while it ran. */
  changedMeanwhile?: string[];
  /** Absolute paths begun and then left, partly restored, because another process changed them. */
  partiallyRestored?: string[];
  rewoundTo?: string;
  scope?: Scope;
  id?: string;
  undoable: number;
  redoable: number;
}

/** The result of rewindFiles, with the SDK's field names (plus rewindfs's additions). */
export interface RewindFilesResult {
  canRewind: boolean;
  error?: string;
  filesChanged: string[];
  insertions: number;
  deletions: number;
  skippedLinks: number;
  conflicts: string[];
  rewindId?: string;
  /** Who else changed each conflict (workspace-relative path → `session <id>` or `external`). */
  conflictsBy?: Record<string, string[]>;
  /** Paths changed since the checkpoint that the scope left out, and the command that includes them. */
  omitted?: { count: number; byActor: Record<string, number>; scope: Scope; command: string };
  /** Absolute paths a real rewind left as another process changed them while it ran. */
  changedMeanwhile?: string[];
  /** Absolute paths it began to restore, then left partly restored (another process changed them). */
  partiallyRestored?: string[];
  /** What history from elsewhere (an import or pull) would have granted and was withheld. */
  withheld?: Array<{ path: string; what: string[] }>;
  /** What the rewind changes besides content: mode and owner [from (null: new), to], attributes set (+) or removed (-). */
  attributeChanges?: Array<{
    path: string;
    mode?: [string | null, string];
    owner?: [string | null, string];
    xattrs?: string[];
  }>;
}

export type Scope = "tool" | "agent" | "all";

export interface Checkpoint {
  uuid: string;
  sessionId: string | null;
  beganAt: string;
  kind: "mount" | "message" | "rewind";
  pathsChanged: number;
  bytesCaptured: number;
}

export interface LogEntry {
  seq: number;
  time: string;
  op: string;
  path: string;
  path2: string | null;
  actor: "tool" | "shell" | "external" | "rewind";
  pid: number;
  process: string;
  checkpoint: string | null;
  toolUseId: string | null;
}

export class RewindfsError extends Error {
  /** The errno of the system call that stopped the request (28: a full disk …), when the daemon names one. */
  readonly errno?: number;
}

export function findSocket(socket?: string, opts?: { cwd?: string; mountinfo?: string }): string;

export class RewindfsClient {
  readonly path: string;
  static connect(socket?: string): Promise<RewindfsClient>;
  request(subtype: string, fields?: Record<string, unknown>): Promise<Record<string, any>>;
  beginMessage(sessionId: string, userMessageId: string): Promise<{ checkpoint: string; seq: number }>;
  toolUse(phase: "pre" | "post", toolName: string, toolUseId: string, filePath?: string, sessionId?: string): Promise<{ unboundPromptIds: string[] }>;
  /** Registers `pid` as an agent, of `sessionId` if given (its writes and its children's belong to that session). */
  registerAgent(pid: number, sessionId?: string): Promise<Record<string, never>>;
  rewindFiles(
    userMessageId: string,
    opts?: { dryRun?: boolean; scope?: Scope; force?: boolean; paths?: string[]; sessionId?: string; trustImported?: boolean },
  ): Promise<RewindFilesResult>;
  /** Undoes the newest rewind not yet undone (a stack; `sessionId`: that session's own); refused over changes made since unless `force`. */
  undoRewind(opts?: { dryRun?: boolean; force?: boolean; sessionId?: string }): Promise<StackResult & { undone?: string }>;
  /** Re-applies the rewind undone last (`sessionId`: of that session's); refused over changes made since the undo unless `force`. */
  redoRewind(opts?: { dryRun?: boolean; force?: boolean; sessionId?: string }): Promise<StackResult & { redone?: string }>;
  listCheckpoints(sessionId?: string): Promise<Checkpoint[]>;
  diff(userMessageId: string, path?: string, scope?: Scope): Promise<string>;
  log(path?: string, limit?: number): Promise<LogEntry[]>;
  status(): Promise<Record<string, any>>;
  close(): void;
}

/** The path of the rewindfs binary that came with this package (from the per-platform optional
 * dependency, e.g. rewindfs-linux-x64). Throws, saying what to do, when there is none. */
export function binaryPath(): string;
