#!/usr/bin/env python3
"""Measures the Claude Code CLI's own rewind_files when a restore (or a deletion) genuinely
fails, on a plain directory (no rewindfs). Root needed (chattr, mount).

    python3 rewind_failures.py OUT_DIR [--only NAME...]

Runs every scenario below through tests/clients/run_session.py with two SDK venvs:
  2.1.330: target/clients/venv (claude-agent-sdk 0.2.187, pinned)
  2.1.332: /tmp/cc332/venv       (claude-agent-sdk 0.2.189)
(override with V330_PY / V332_PY). Writes OUT_DIR/<version>/<scenario>.jsonl (run_session's
output) and prints a summary per scenario: dry run, real rewind, tree after.

Failure modes, applied after the turn t1 and before the rewind of t1:
  chattr:     chattr +i on the file to fail (open O_WRONLY / unlink -> EPERM)
  robind:     sub/ bind-mounted onto itself read-only (EROFS)
  parentfile: sub/ removed and replaced by a regular file (lstat -> ENOTDIR)
"""
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN = HERE.parent / "run_session.py"
REPO = HERE.parents[2]
PYS = {
    "2.1.330": os.environ.get("V330_PY", str(REPO / "target/clients/venv/bin/python")),
    "2.1.332": os.environ.get("V332_PY", "/tmp/cc332/venv/bin/python"),
}

FAIL = {
    "chattr": ("chattr +i {f}", "chattr -i {f} 2>/dev/null; true"),
    "robind": ("mount --bind sub sub && mount -o remount,bind,ro sub", "umount sub; true"),
    "parentfile": ("rm -rf sub && printf 'notadir\\n' > sub", "true"),
}


def W(p, c):
    return [{"tool": "Write", "input": {"file_path": "{ws}/" + p, "content": c}}]


def R(p):
    return [{"tool": "Read", "input": {"file_path": "{ws}/" + p}}]


def E(p, a, b):
    return [{"tool": "Edit", "input": {"file_path": "{ws}/" + p, "old_string": a, "new_string": b}}]


# t1's tool calls (each its own model response, so they run in this order = tracking order)
LAYOUTS = {
    # deletion tracked first, then a fine restore, then the failing restore
    "newfirst": ([W("new.txt", "new\n"), R("ok.txt"), E("ok.txt", "ok0", "ok1"),
                  R("sub/bad.txt"), E("sub/bad.txt", "bad0", "bad1")], "sub/bad.txt"),
    # fine restore, failing restore, deletion tracked last
    "newlast": ([R("ok.txt"), E("ok.txt", "ok0", "ok1"), R("sub/bad.txt"),
                 E("sub/bad.txt", "bad0", "bad1"), W("new.txt", "new\n")], "sub/bad.txt"),
    # only a deletion and the failing restore: nothing else can change
    "nook": ([W("new.txt", "new\n"), R("sub/bad.txt"), E("sub/bad.txt", "bad0", "bad1")], "sub/bad.txt"),
    # the failing path is a DELETION (a file the turn created in sub/), plus a fine restore
    # and a fine deletion
    "delfail": ([W("new.txt", "new\n"), W("sub/created.txt", "created\n"), R("ok.txt"),
                 E("ok.txt", "ok0", "ok1")], "sub/created.txt"),
    # only the failing deletion
    "delfail_only": ([W("sub/created.txt", "created\n")], "sub/created.txt"),
    # the failing deletion tracked BEFORE a fine deletion (does a failed deletion hold later ones?)
    "delfail_first": ([W("sub/created.txt", "created\n"), W("new.txt", "new\n")], "sub/created.txt"),
    # failing restore + a deletion + a tracked file replaced by a symlink (a link-safety skip);
    # nothing can change
    "nook_link": ([W("new.txt", "new\n"), R("link.txt"), E("link.txt", "l0", "l1"),
                   R("sub/bad.txt"), E("sub/bad.txt", "bad0", "bad1")], "sub/bad.txt"),
}
# extra shell run together with the failure (after t1, before the rewind)
EXTRA = {"nook_link": "rm link.txt && ln -s ok.txt link.txt && "}


def scenario(layout, mode):
    calls, bad = LAYOUTS[layout]
    on, off = (s.format(f=bad) for s in FAIL[mode])
    on = EXTRA.get(layout, "") + on
    return {"steps": [
        {"shell": "printf 'ok0\\n' > ok.txt; mkdir -p sub; printf 'bad0\\n' > sub/bad.txt; printf 'keep\\n' > sub/keep.txt; printf 'l0\\n' > link.txt"},
        {"prompt": "turn t1", "name": "t1", "responses": calls},
        {"tree": True, "name": "after_t1"},
        {"shell": on},
        {"rewind": "t1", "dry_run": True},
        {"rewind": "t1"},
        {"tree": True, "name": "after_rewind"},
        {"shell": off},
        # a second real rewind once the obstacle is gone (does the CLI still hold the state?)
        {"rewind": "t1", "dry_run": True},
    ]}


def ltree(entries):
    return {p: (e.get("text", e["type"]) if e["type"] == "file" else e["type"]) for p, e in entries.items()}


def main():
    out = Path(sys.argv[1])
    only = sys.argv[3:] if len(sys.argv) > 2 and sys.argv[2] == "--only" else None
    for layout in LAYOUTS:
        for mode in FAIL:
            name = f"{layout}_{mode}"
            if only and name not in only:
                continue
            for ver, py in PYS.items():
                d = out / ver
                d.mkdir(parents=True, exist_ok=True)
                ws = Path("/tmp/cc332/ws") / ver / name
                subprocess.run(["bash", "-c", f"umount {ws}/sub 2>/dev/null; chattr -R -i {ws} 2>/dev/null; rm -rf {ws}"])
                ws.mkdir(parents=True)
                sc = d / f"{name}.scenario.json"
                sc.write_text(json.dumps(scenario(layout, mode), indent=1))
                p = subprocess.run([py, str(RUN), str(sc), "--workspace", str(ws), "--brief", "--wire-log",
                                    "--log-dir", str(d / f"{name}.logs")], capture_output=True, text=True, timeout=300)
                (d / f"{name}.jsonl").write_text(p.stdout)
                (d / f"{name}.stderr").write_text(p.stderr)
                rs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
                summ = {"scenario": name, "version": ver}
                for r in rs:
                    if r["kind"] == "rewind":
                        key = ("dry" if r["dry_run"] else "real") + ("2" if ("dry" if r["dry_run"] else "real") in summ else "")
                        summ[key] = r.get("response") if r["ok"] else {"ERROR": r.get("error")}
                    elif r["kind"] == "tree":
                        summ["tree" + str(sum(k.startswith("tree") for k in summ))] = ltree(r["entries"])
                    elif r["kind"] == "shell" and r["rc"]:
                        summ.setdefault("shell_errors", []).append([r["cmd"], r["out"]])
                if p.returncode:
                    summ["rc"] = p.returncode
                    summ["stderr_tail"] = p.stderr[-600:]
                print(json.dumps(summ), flush=True)


if __name__ == "__main__":
    main()
