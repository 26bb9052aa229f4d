#!/usr/bin/env python3
"""Measures the PreSkillShellCommand hook event (CLI 2.1.332) and checks 2.1.330 lacks it.

    python3 skill_shell_hook.py OUT_DIR

For each CLI version and case: a fresh workspace with
  .claude/commands/x.md       (allowed-tools Bash(echo:*), line !`echo hi > f.txt`)
  .claude/skills/y/SKILL.md   (allowed-tools Bash(echo:*), line !`echo skill > g.txt`)
  .claude/settings.json       (every hook event below -> hooklog.py, which logs its stdin)
runs `claude -p PROMPT` against fake_api.py and writes OUT_DIR/<ver>/<case>/{hooks.jsonl,
api.jsonl,stdout,stderr,files}. Prints a summary per case.
"""
import json, os, shutil, subprocess, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from fake_api import FakeAPI  # noqa: E402
from run_session import offline_env  # noqa: E402

REPO = HERE.parents[2]
CLIS = {
    "2.1.330": os.environ.get("V330_CLI", str(next((REPO / "target/clients/venv/lib").glob("python3*/site-packages/claude_agent_sdk/_bundled/claude")))),
    "2.1.332": os.environ.get("V332_CLI", str(next(Path("/tmp/cc332/venv/lib").glob("python3*/site-packages/claude_agent_sdk/_bundled/claude")))),
}
EVENTS = ["SessionStart", "UserPromptSubmit", "UserPromptExpansion", "PreSkillShellCommand",
          "PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "Stop", "SessionEnd"]
MATCHED = {"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PreSkillShellCommand"}

CMD_X = """---
allowed-tools: Bash(echo:*)
description: writes f.txt
---
!`echo hi > f.txt`
Say done.
"""
SKILL_Y = """---
name: y
description: writes g.txt
allowed-tools: Bash(echo:*)
---
!`echo skill > g.txt`
Say done.
"""

CMD_Z = """---
allowed-tools: Bash(echo:*)
description: no redirect
---
!`echo hi`
Say done.
"""
CMD_W = """---
allowed-tools: Bash(echo:*)
description: two lines
---
!`echo one > f.txt`
!`echo two > h.txt`
Say done.
"""

# case: (prompt, extra CLI args, hook env, fake API turn, events in settings)
CASES = {
    "cmd_bypass_sleep": ("/x", ["--dangerously-skip-permissions"], {"HOOK_SLEEP": "2"}, None, EVENTS),
    "cmd_default_mode": ("/x", [], {}, None, EVENTS),
    "skill_typed": ("/y", ["--dangerously-skip-permissions"], {}, None, EVENTS),
    "skill_by_model": ("use the skill", ["--dangerously-skip-permissions"], {},
                       [[{"tool": "Skill", "input": {"skill": "y"}}]], EVENTS),
    "cmd_hook_exit2": ("/x", ["--dangerously-skip-permissions"],
                       {"HOOK_EXIT": "2", "HOOK_STDERR": "no shell here"}, None, EVENTS),
    "cmd_hook_deny_json": ("/x", ["--dangerously-skip-permissions"],
                           {"HOOK_STDOUT": json.dumps({"hookSpecificOutput": {"hookEventName": "PreSkillShellCommand",
                            "permissionDecision": "deny", "permissionDecisionReason": "denied by json"}})}, None, EVENTS),
    "cmd_default_noredirect": ("/z", [], {}, None, EVENTS),
    "cmd_two_lines_sleep": ("/w", ["--dangerously-skip-permissions"], {"HOOK_SLEEP": "1"}, None, EVENTS),
    # without the new event in settings (for 2.1.330: does the unknown key break the others?)
    "cmd_no_new_event": ("/x", ["--dangerously-skip-permissions"], {}, None,
                         [e for e in EVENTS if e != "PreSkillShellCommand"]),
}


def run(ver, cli, case, out):
    prompt, args, henv, turn, events = CASES[case]
    ws = Path("/tmp/cc332/skill") / ver / case
    shutil.rmtree(ws, ignore_errors=True)
    (ws / ".claude/commands").mkdir(parents=True)
    (ws / ".claude/skills/y").mkdir(parents=True)
    (ws / ".claude/commands/x.md").write_text(CMD_X)
    (ws / ".claude/skills/y/SKILL.md").write_text(SKILL_Y)
    (ws / ".claude/commands/z.md").write_text(CMD_Z)
    (ws / ".claude/commands/w.md").write_text(CMD_W)
    d = out / ver / case
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    hooks = {}
    for ev in events:
        e = {"hooks": [{"type": "command", "command": f"python3 {HERE / 'hooklog.py'} {d / 'hooks.jsonl'} {ev}"}]}
        if ev in MATCHED:
            e["matcher"] = "*"
        hooks[ev] = [e]
    (ws / ".claude/settings.json").write_text(json.dumps({"hooks": hooks}, indent=1))
    home = Path("/tmp/cc332/home") / ver / case
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    api = FakeAPI({"turns": [{"responses": turn or []}], "default_text": "Done."}, log_path=str(d / "api.jsonl")).start()
    env = {**os.environ, **offline_env(api.base_url, str(home)), **henv}
    t0 = time.time()
    p = subprocess.run([cli, "-p", prompt, "--output-format", "stream-json", "--verbose", *args],
                       cwd=ws, env=env, capture_output=True, text=True, timeout=120)
    api.stop()
    (d / "stdout").write_text(p.stdout)
    (d / "stderr").write_text(p.stderr)
    files = {f: [(ws / f).read_text(), round((ws / f).stat().st_mtime, 3)] for f in ("f.txt", "g.txt", "h.txt") if (ws / f).exists()}
    (d / "files").write_text(json.dumps(files))
    hl = [json.loads(l) for l in open(d / "hooks.jsonl")] if (d / "hooks.jsonl").exists() else []
    result = next((json.loads(l) for l in p.stdout.splitlines() if '"type":"result"' in l), None)
    prompts = []
    if (d / "api.jsonl").exists():
        for l in open(d / "api.jsonl"):
            r = json.loads(l)
            req = r.get("request") or r.get("body") or {}
            if req.get("tools"):
                msgs = req.get("messages") or []
                if msgs:
                    c = msgs[0].get("content")
                    prompts.append(c if isinstance(c, str) else [b.get("text", b.get("type")) for b in c])
                break
    print(json.dumps({"version": ver, "case": case, "rc": p.returncode, "secs": round(time.time() - t0, 1),
                      "files": {k: [v[0], round(v[1] - t0, 2)] for k, v in files.items()}, "hook_order": [(h["event"], round(h["t"] - t0, 2), round(h["t_end"] - t0, 2), h.get("payload", {}).get("tool_name") if isinstance(h.get("payload"), dict) else None) for h in hl],
                      "result": result and {k: result.get(k) for k in ("subtype", "is_error", "result")},
                      "first_api_prompt": prompts[:1]}), flush=True)


def main():
    out = Path(sys.argv[1])
    only = sys.argv[2:]
    for case in CASES:
        if only and case not in only:
            continue
        for ver, cli in CLIS.items():
            run(ver, cli, case, out)


if __name__ == "__main__":
    main()
