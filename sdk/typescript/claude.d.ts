// Types of the Claude Agent SDK integration (rewindfs/claude). They are structural, so this
// package needs no @anthropic-ai/claude-agent-sdk to type-check, and the SDK's own types fit
// them: withRewindfs(options) returns the same type it is given (the SDK's `Options`), a
// PromptStream is an `AsyncIterable<SDKUserMessage>` for `query({ prompt })`.
import type { Readable, Writable } from "node:stream";

import type { RewindfsClient } from "./index.js";

/** A uuid as the SDK types it (`UUID` of node:crypto). The CLI itself takes any string. */
export type MessageUuid = `${string}-${string}-${string}-${string}-${string}`;

/** The hook events whose callbacks report tool spans. */
export type SpanHookEvent = "PreToolUse" | "PostToolUse" | "PostToolUseFailure" | "UserPromptSubmit" | "Stop" | "StopFailure";

/** An SDK hook callback (`HookCallback`): the hook input, the tool use id, `{ signal }`. */
export type SpanHookCallback = (
  input: { hook_event_name: string; tool_name?: string; tool_input?: unknown; tool_use_id?: string },
  toolUseID: string | undefined,
  options: { signal: AbortSignal },
) => Promise<Record<string, never>>;

/** An SDK `HookCallbackMatcher` with rewindfs's callbacks (no matcher: every tool). */
export interface SpanHookMatcher {
  matcher?: string;
  hooks: SpanHookCallback[];
}

/** What registerCli's spawn wrapper is given (the SDK's `SpawnOptions`). */
export interface CliSpawnOptions {
  command: string;
  args: string[];
  cwd?: string;
  env: { [name: string]: string | undefined };
  signal: AbortSignal;
}

/** What it returns (the SDK's `SpawnedProcess`, with the pid). */
export interface CliProcess {
  stdin: Writable;
  stdout: Readable;
  readonly pid?: number;
  readonly killed: boolean;
  readonly exitCode: number | null;
  readonly signalCode?: NodeJS.Signals | null;
  kill(signal: NodeJS.Signals): boolean;
  on(event: "exit", listener: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  on(event: "error", listener: (error: Error) => void): void;
  once(event: "exit", listener: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  once(event: "error", listener: (error: Error) => void): void;
  off(event: "exit", listener: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  off(event: "error", listener: (error: Error) => void): void;
}

/** The part of the SDK's `Options` the adapter reads and sets. */
export interface AgentOptionsLike {
  hooks?: { [event: string]: Array<{ matcher?: string; hooks: Array<(...args: any[]) => Promise<unknown>> }> | undefined };
  spawnClaudeCodeProcess?: (options: CliSpawnOptions) => any;
  stderr?: (data: string) => void;
  /** Made absolute by withRewindfs (the host's cwd when unset). */
  cwd?: string;
}

export interface RegisterCliOptions {
  /** Called once the daemon has registered the CLI's pid. */
  onRegistered?: (pid: number) => void;
  /** The session the CLI works for, when several share the workspace (the id given to sendPrompt). */
  sessionId?: string;
}

/** A user message as sendPrompt streams it (an `SDKUserMessage`). */
export interface PromptMessage {
  type: "user";
  message: { role: "user"; content: string | Array<{ type: "text"; text: string }> };
  parent_tool_use_id: null;
  session_id: string;
  uuid: MessageUuid;
}

/** The file a tool call names (`file_path`, `notebook_path` or `path`), if any. */
export function fileOf(toolInput: unknown): string | undefined;

/**
 * SDK hook callbacks that report tool spans: open at PreToolUse, closed at PostToolUse or
 * PostToolUseFailure, and any span still open (a tool refused after PreToolUse) closed at the
 * next PreToolUse, at UserPromptSubmit and at Stop/StopFailure. Never blocks the agent.
 */
export function toolSpanHooks(rw: RewindfsClient, opts?: { sessionId?: string }): Record<SpanHookEvent, SpanHookMatcher[]>;

/**
 * A copy of `options` whose `spawnClaudeCodeProcess` registers the spawned CLI's pid as the
 * agent before the CLI reads any input (a custom spawner in `options` is wrapped; one that
 * returns no pid is left unregistered, with a warning).
 */
export function registerCli<O extends AgentOptionsLike>(options: O, rw: RewindfsClient, opts?: RegisterCliOptions): O;

/** A copy of `options` with the tool-span hooks added (existing hooks kept) and registerCli applied. */
export function withRewindfs<O extends AgentOptionsLike>(
  options: O,
  rw: RewindfsClient,
  opts?: RegisterCliOptions & { registerCli?: boolean },
): O;

/** Streaming input for `query({ prompt })` that stays open until `end()`. */
export class PromptStream implements AsyncIterable<PromptMessage> {
  /** uuids already sent (sendPrompt refuses to send one twice). */
  readonly sent: Set<string>;
  push(message: PromptMessage): void;
  end(): void;
  [Symbol.asyncIterator](): AsyncGenerator<PromptMessage, void, undefined>;
}

/**
 * Begins the checkpoint of a new user message, then streams it with that uuid; resolves to the
 * uuid. Send the next prompt only after this turn's `result`.
 */
export function sendPrompt(
  prompts: PromptStream,
  rw: RewindfsClient,
  sessionId: string,
  text: PromptMessage["message"]["content"],
  opts?: { uuid?: MessageUuid },
): Promise<MessageUuid>;

/** One turn's messages up to and including its `result`, without closing the query. */
export function receiveResponse<M extends { type: string }>(q: AsyncIterator<M>): AsyncGenerator<M, void, undefined>;
