#!/usr/bin/env node
// Run a scripted session through the TypeScript Claude Agent SDK (query() with streaming
// input), offline against fake_api.py. The same scenario format as run_session.py, with
// fewer step kinds: prompt, rewind (dryRun or real), shell, tree-less.
//
//   NODE_PATH=$REWINDFS_CLIENTS_DIR/npm/node_modules \
//   node tests/clients/run_session_ts.mjs SCENARIO.json --workspace DIR --base-url URL \
//        [--home DIR] [--hook-log FILE]
//
// The fake API must already run (python3 tests/clients/fake_api.py --script … --port-file …);
// its script is the list of the scenario's prompt steps' "responses" (run_session.py's
// `script_of` builds it; `python3 run_session.py --print-script SCENARIO` prints it).
// Prints one JSON line per step, like run_session.py.
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const scenarioPath = args[0];
const ws = path.resolve(opt('--workspace'));
const baseUrl = opt('--base-url');
const home = path.resolve(opt('--home', fs.mkdtempSync(path.join(os.tmpdir(), 'rewindfs-home-'))));
const hookLog = opt('--hook-log');
const clientsDir = process.env.REWINDFS_CLIENTS_DIR
  || path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../target/clients');
const require = createRequire(path.join(clientsDir, 'npm', 'package.json'));
const sdkPath = require.resolve('@anthropic-ai/claude-agent-sdk');
const { query } = await import(sdkPath);

const subst = (v) => typeof v === 'string' ? v.replaceAll('{ws}', ws)
  : Array.isArray(v) ? v.map(subst)
  : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, subst(x)]))
  : v;
const scenario = subst(JSON.parse(fs.readFileSync(scenarioPath, 'utf8')));
const steps = scenario.steps || scenario.turns || [];
fs.mkdirSync(ws, { recursive: true });
fs.mkdirSync(home, { recursive: true });
if (scenario.settings) {
  fs.mkdirSync(path.join(ws, '.claude'), { recursive: true });
  fs.writeFileSync(path.join(ws, '.claude', 'settings.json'), JSON.stringify(scenario.settings));
}

// SDK hook callbacks: log what they get (the same payloads the command hooks get).
const logHook = async (input, toolUseID) => {
  if (hookLog) fs.appendFileSync(hookLog, JSON.stringify({ t: Date.now() / 1000, toolUseID, input }) + '\n');
  return {};
};
const hookEvents = ['UserPromptSubmit', 'PreToolUse', 'PostToolUse', 'PostToolUseFailure', 'Stop'];
const hooks = Object.fromEntries(hookEvents.map((e) => [e, [{ hooks: [logHook] }]]));

// Streaming input: the generator hands out one prompt whenever the driver pushes one.
const pending = [];
let wake = null;
let closed = false;
async function* input() {
  for (;;) {
    while (pending.length) yield pending.shift();
    if (closed) return;
    await new Promise((r) => { wake = r; });
  }
}
const push = (m) => { pending.push(m); if (wake) { const w = wake; wake = null; w(); } };

const q = query({
  prompt: input(),
  options: {
    cwd: ws,
    permissionMode: 'bypassPermissions',
    allowDangerouslySkipPermissions: true,
    enableFileCheckpointing: true,
    extraArgs: { 'replay-user-messages': null },
    settingSources: ['project'],
    hooks,
    env: {
      ...process.env,
      HOME: home,
      ANTHROPIC_BASE_URL: baseUrl,
      ANTHROPIC_API_KEY: 'sk-ant-fake-offline',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_AUTOUPDATER: '1',
      IS_SANDBOX: '1',
    },
    stderr: (d) => process.stderr.write(d),
    ...(scenario.options_ts || {}),
  },
});
const it = q[Symbol.asyncIterator]();
const turns = {};
const turnList = [];
let sessionId = '';
const resolve = (t) => typeof t === 'number' ? turnList[t] : (turns[t] || t);

for (const step of steps) {
  const t0 = Date.now();
  let out;
  if ('prompt' in step) {
    const uuid = step.uuid || randomUUID();
    push({ type: 'user', message: { role: 'user', content: step.prompt }, parent_tool_use_id: null, session_id: sessionId, uuid });
    let echoed = null;
    const types = [];
    for (;;) {
      const { value: m, done } = await it.next();
      if (done) break;
      types.push(m.type + (m.subtype ? ':' + m.subtype : ''));
      if (m.session_id) sessionId = m.session_id;
      if (m.type === 'user' && typeof m.message?.content === 'string' && !echoed) echoed = m.uuid;
      if (m.type === 'result') break;
    }
    const name = step.name || `t${turnList.length}`;
    turns[name] = uuid;
    turnList.push(uuid);
    out = { kind: 'prompt', name, uuid, echoed_uuid: echoed, session_id: sessionId, types };
  } else if ('rewind' in step) {
    const uuid = resolve(step.rewind);
    try {
      out = { kind: 'rewind', target: step.rewind, uuid, dry_run: !!step.dry_run, ok: true, response: await q.rewindFiles(uuid, { dryRun: !!step.dry_run }) };
    } catch (e) {
      out = { kind: 'rewind', target: step.rewind, uuid, dry_run: !!step.dry_run, ok: false, error: String(e?.message ?? e) };
    }
  } else if ('shell' in step) {
    let o = '';
    let rc = 0;
    try { o = execFileSync('bash', ['-c', step.shell], { cwd: ws, encoding: 'utf8' }); } catch (e) { rc = e.status; o = String(e.stdout || '') + String(e.stderr || ''); }
    out = { kind: 'shell', cmd: step.shell, rc, out: o };
  } else {
    out = { kind: 'skipped', step };
  }
  out.ms = Date.now() - t0;
  console.log(JSON.stringify(out));
}
closed = true;
if (wake) wake();
q.close?.();
