#!/usr/bin/env python3
"""Command hook for skill_shell_hook.py: appends {event, t, payload, files} to LOG.
    hooklog.py LOG EVENT
env: HOOK_SLEEP=S (sleep S s, PreSkillShellCommand only, then record the files again),
     HOOK_EXIT=N and HOOK_STDERR=TEXT / HOOK_STDOUT=JSON (PreSkillShellCommand only)."""
import json, os, sys, time
log, ev = sys.argv[1], sys.argv[2]
raw = sys.stdin.read()
try:
    payload = json.loads(raw)
except ValueError:
    payload = raw
files = lambda: sorted(f for f in ("f.txt", "g.txt", "h.txt") if os.path.exists(f))
rec = {"event": ev, "t": round(time.time(), 3), "payload": payload, "files_at_start": files()}
pre = ev == "PreSkillShellCommand"
if pre and os.environ.get("HOOK_SLEEP"):
    time.sleep(float(os.environ["HOOK_SLEEP"]))
    rec["files_after_sleep"] = files()
rec["t_end"] = round(time.time(), 3)
with open(log, "a") as f:
    f.write(json.dumps(rec) + "\n")
if pre and os.environ.get("HOOK_STDOUT"):
    print(os.environ["HOOK_STDOUT"])
if pre and os.environ.get("HOOK_STDERR"):
    print(os.environ["HOOK_STDERR"], file=sys.stderr)
sys.exit(int(os.environ.get("HOOK_EXIT", "0")) if pre else 0)
