// Type check, not run: the adapter's types fit @anthropic-ai/claude-agent-sdk's own.
// tests/clients/test_ts_types.py compiles it with the pinned SDK and typescript (versions.env):
//   tsc --noEmit --strict --module nodenext --moduleResolution nodenext test/claude.types.ts
import { query, type Options } from "@anthropic-ai/claude-agent-sdk";

import { RewindfsClient } from "../index.js";
import { PromptStream, receiveResponse, registerCli, sendPrompt, withRewindfs } from "../claude.js";

export async function example(): Promise<void> {
  const rw = await RewindfsClient.connect();
  const base: Options = { cwd: ".", enableFileCheckpointing: true, hooks: { PreToolUse: [{ hooks: [async () => ({})] }] } };
  const options: Options = withRewindfs(base, rw, { onRegistered: (pid: number) => void pid, sessionId: "my-session" });
  const alsoOptions: Options = registerCli(base, rw);
  void alsoOptions;
  const prompts = new PromptStream();
  const q = query({ prompt: prompts, options });
  const turn = await sendPrompt(prompts, rw, "my-session", "Refactor utils.ts");
  for await (const m of receiveResponse(q)) {
    if (m.type === "result") console.log(m.subtype);
  }
  const preview = await rw.rewindFiles(turn, { dryRun: true, sessionId: "my-session" });
  const left: number | undefined = preview.omitted?.count;
  void left;
  await rw.undoRewind({ sessionId: "my-session", dryRun: true });
  const sdkPreview = await q.rewindFiles(turn, { dryRun: true });
  console.log(preview.filesChanged, sdkPreview.filesChanged);
  prompts.end();
  rw.close();
}
