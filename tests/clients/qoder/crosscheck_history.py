#!/usr/bin/env python3
"""Check fake_qodercli's file history against the binary's own code, run under Node.

Why: fake_qodercli's ``rewind_files`` is the oracle for rewindfs's ``tool`` scope, so its
file history must behave exactly like qodercli 1.1.76's. This script cuts the file-history
module (class Ip and its helpers, with jsdiff's diffLines it calls) out of the bundled
qodercli ELF *verbatim*, runs it under Node against one workspace, runs the Python port
against a twin workspace, applies the same random sequence of turns, tool edits, shell-like
edits, mode changes, deletions, mtime tricks and rewinds to both, and compares every answer
and the trees after every rewind. Nothing of the binary is modified or executed as qodercli.

    python3 crosscheck_history.py [--binary PATH/qodercli] [--seeds 200] [--steps 40]

Needs ``node`` (>= 18). The binary defaults to the installed qoder_agent_sdk's
``_bundled/qodercli`` (or /tmp/qoder/pkg/...). Exit status 0 when all runs agree.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fake_qodercli as fq  # noqa: E402

# Markers that delimit the code we lift; searched for, so offsets may move between builds.
HISTORY_START = b'import{randomUUID as uu}from"crypto";import{constants as du}from"fs";'
HISTORY_END = b'import GS from"path"'
DIFF_START = b"class mc{diff(t,n,o={})"
DIFF_BASE_END = b"class _ze extends mc{}"
LINEDIFF_START = b"class Sze extends mc"
LINEDIFF_END = b"function ezt(t)"


def find_binary(explicit: str | None) -> str:
    if explicit:
        return explicit
    try:
        import qoder_agent_sdk  # noqa: F401

        p = os.path.join(os.path.dirname(qoder_agent_sdk.__file__), "_bundled", "qodercli")
        if os.path.exists(p):
            return p
    except ImportError:
        pass
    return "/tmp/qoder/pkg/qoder_agent_sdk/_bundled/qodercli"


def cut(data: bytes, start: bytes, end: bytes, after: int = 0) -> tuple[int, str]:
    a = data.index(start, after)
    b = data.index(end, a)
    return a, data[a:b].decode("latin-1")


def build_js(binary: str, outdir: str) -> str:
    data = open(binary, "rb").read()
    off_h, history = cut(data, HISTORY_START, HISTORY_END)
    off_d, base = cut(data, DIFF_START, DIFF_BASE_END)
    _, linediff = cut(data, LINEDIFF_START, LINEDIFF_END, off_d)
    print(f"lifted file history @{off_h} ({len(history)} bytes), jsdiff @{off_d}", file=sys.stderr)
    module = (
        "// Lifted verbatim from qodercli 1.1.76; only the logger `e`, the config dir `M` and\n"
        "// jsdiff's `qm` (defined in other bundle chunks) are supplied here.\n"
        + history.replace(";function gp(", ";const e={warn(){},log(){},debug(){}};"
                          "const M={getGlobalConfigDir:()=>process.env.HOME+'/.qoder'};function gp(", 1)
        + "\n" + base + "\n" + linediff + "\nexport{Ip,gp};\n"
    )
    path = os.path.join(outdir, "history.mjs")
    open(path, "w").write(module)
    server = os.path.join(outdir, "server.mjs")
    open(server, "w").write(r"""
import {Ip} from "./history.mjs";
import readline from "readline";
let h;
const rl = readline.createInterface({input: process.stdin});
for await (const line of rl) {
  const c = JSON.parse(line);
  let res;
  try {
    if (c.cmd === "new") { h = new Ip({cwd: c.cwd, sessionId: c.sessionId, checkpointRoot: c.root, enabled: true}); res = null; }
    else if (c.cmd === "snapshot") res = await h.makeSnapshot(c.id) ?? null;
    else if (c.cmd === "track") res = await h.trackEdit(c.path, c.id) ?? null;
    else if (c.cmd === "rewind") res = await h.rewindDetailed(c.id);
    else if (c.cmd === "stats") res = (await h.getDiffStats(c.id)) ?? null;
    else if (c.cmd === "can") res = h.canRewind(c.id);
    else if (c.cmd === "state") res = {tracked: [...h.state.trackedFiles], snapshots: h.state.snapshots.map(s => ({
        messageId: s.messageId, files: Object.fromEntries(Object.entries(s.trackedFileBackups).map(([k, v]) =>
          [k, {name: v.backupFileName === null ? null : "B", version: v.version, failed: !!v.captureFailed}]))}))};
    process.stdout.write(JSON.stringify({ok: true, res}) + "\n");
  } catch (err) {
    process.stdout.write(JSON.stringify({ok: false, error: err.message}) + "\n");
  }
}
""")
    return server


class JsHistory:
    def __init__(self, server: str):
        self.p = subprocess.Popen(["node", server], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def py_call(h: fq.FileHistory, cmd: str, **kw):
    try:
        if cmd == "snapshot":
            res = h.make_snapshot(kw["id"])
        elif cmd == "track":
            res = h.track_edit(kw["path"], kw["id"])
        elif cmd == "rewind":
            res = h.rewind_detailed(kw["id"])
        elif cmd == "stats":
            res = h.diff_stats(kw["id"])
        elif cmd == "can":
            res = h.can_rewind(kw["id"])
        elif cmd == "state":
            res = {"tracked": list(h.tracked), "snapshots": [
                {"messageId": s["messageId"], "files": {k: {"name": None if v["backupFileName"] is None else "B",
                                                            "version": v["version"], "failed": bool(v.get("captureFailed"))}
                                                        for k, v in s["trackedFileBackups"].items()}}
                for s in h.snapshots]}
        return {"ok": True, "res": res}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": str(e)}


def tree(root: str) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p).replace(root, "<ws>"))
            else:
                out[rel] = (oct(stat.S_IMODE(st.st_mode)), open(p, "rb").read())
    return out


def norm(value, ws: str):
    s = json.dumps(value, sort_keys=False)
    s = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}@v", "<uuid>@v", s)
    return json.loads(s.replace(ws, "<base>"))


def run_seed(seed: int, steps: int, server: str, verbose: bool) -> bool:
    rng = random.Random(seed)
    base = tempfile.mkdtemp(prefix=f"qxc{seed}-")
    ws = {"js": os.path.join(base, "js", "ws"), "py": os.path.join(base, "py", "ws")}
    roots = {"js": os.path.join(base, "js", "root"), "py": os.path.join(base, "py", "root")}
    for k in ws:
        os.makedirs(ws[k])
    js = JsHistory(server)
    js.call(cmd="new", cwd=ws["js"], sessionId="sess", root=roots["js"])
    py = fq.FileHistory(ws["py"], "sess", True)
    py.root = roots["py"]
    names = ["a.txt", "b.txt", "sub/c.txt", "d.bin", "outside.txt"]
    contents = ["", "x\n", "one\ntwo\n", "one\nTWO\nthree", "a\r\nb\r\n", "\u00e9\n\xff", "q" * 50 + "\n"]
    turns: list[str] = []
    ok = True

    def both(cmd, **kw):
        nonlocal ok
        r_js = js.call(cmd=cmd, **{k: (v.replace("<ws>", ws["js"]) if isinstance(v, str) else v) for k, v in kw.items()})
        r_py = py_call(py, cmd, **{k: (v.replace("<ws>", ws["py"]) if isinstance(v, str) else v) for k, v in kw.items()})
        a, b = norm(r_js, os.path.dirname(ws["js"])), norm(r_py, os.path.dirname(ws["py"]))
        if a != b:
            if ok:  # the first difference of a seed is the informative one
                print(f"seed {seed}: {cmd} {kw} differs\n  js: {a}\n  py: {b}")
            ok = False
        elif verbose:
            print(f"  {cmd} {kw} -> {a}")
        return a

    def mutate(fn):
        for k in ("js", "py"):
            fn(ws[k])

    for step in range(steps):
        r = rng.random()
        name = rng.choice(names)
        rel = name if name != "outside.txt" else "../outside.txt"
        if r < 0.18 or not turns:  # a user message begins a turn
            mid = f"m{len(turns)}"
            turns.append(mid)
            both("snapshot", id=mid)
        elif os.path.isdir(os.path.normpath(os.path.join(ws["py"], rel))) and r < 0.55:
            pass  # Write/Edit refuse a directory before trackEdit; so does the shell here
        elif r < 0.45:  # a file tool: trackEdit then write (as Write/Edit do)
            text = rng.choice(contents)
            both("track", path=f"<ws>/{rel}", id=turns[-1])

            def w(root, rel=rel, text=text):
                p = os.path.normpath(os.path.join(root, rel))
                if not os.path.isdir(os.path.dirname(p)):
                    os.makedirs(os.path.dirname(p))
                fq.write_text_atomic(p, text)
            mutate(w)
        elif r < 0.55:  # shell work: not tracked
            text = rng.choice(contents)

            def w2(root, rel=rel, text=text):
                p = os.path.normpath(os.path.join(root, rel))
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w", encoding="utf-8") as f:
                    f.write(text)
            mutate(w2)
        elif r < 0.62:
            mode = rng.choice([0o600, 0o644, 0o755])

            def ch(root, rel=rel, mode=mode):
                p = os.path.normpath(os.path.join(root, rel))
                if os.path.exists(p):
                    os.chmod(p, mode)
            mutate(ch)
        elif r < 0.68:
            def rm(root, rel=rel):
                p = os.path.normpath(os.path.join(root, rel))
                if os.path.isfile(p):
                    os.unlink(p)
            mutate(rm)
        elif r < 0.72:  # same size, mtime in the past: the binary's mtime shortcut
            def sneaky(root, rel=rel):
                p = os.path.normpath(os.path.join(root, rel))
                if os.path.isfile(p):
                    data = open(p, "rb").read()
                    if data:
                        open(p, "wb").write(bytes([data[0] ^ 1]) + data[1:])
                        os.utime(p, ns=(1_000_000_000, 1_000_000_000))
            mutate(sneaky)
        elif r < 0.74:  # a file becomes a directory (or back): copy/unlink/read failures
            def dirify(root, rel=rel):
                p = os.path.normpath(os.path.join(root, rel))
                if os.path.isdir(p):
                    shutil.rmtree(p)
                else:
                    if os.path.exists(p):
                        os.unlink(p)
                    os.makedirs(p, exist_ok=True)
            mutate(dirify)
        elif r < 0.78:  # a lost backup
            if rng.random() < 0.5:
                for k in ("js", "py"):
                    d = os.path.join(roots[k], "sess")
                    files = sorted(os.listdir(d)) if os.path.isdir(d) else []
                    # the same backup in both worlds: the n-th by version order is not stable,
                    # so drop every backup of one version instead
                    v = f"@v{random.Random(seed * 1000 + step).randint(1, 3)}"
                    for f in files:
                        if f.endswith(v):
                            os.unlink(os.path.join(d, f))
        elif r < 0.88:
            both("stats", id=rng.choice(turns + ["nope"]))
            both("can", id=rng.choice(turns + ["nope"]))
        else:
            target = rng.choice(turns)
            both("stats", id=target)
            both("rewind", id=target)
            t_js, t_py = tree(os.path.join(base, "js")), tree(os.path.join(base, "py"))
            t_js = {k: v for k, v in t_js.items() if not k.startswith("root")}
            t_py = {k: v for k, v in t_py.items() if not k.startswith("root")}
            if t_js != t_py:
                if ok:
                    print(f"seed {seed}: trees differ after rewind to {target}\n  js: {t_js}\n  py: {t_py}")
                ok = False
        both("state")
    js.close()
    shutil.rmtree(base, ignore_errors=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if not shutil.which("node"):
        print("node not found", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="qxc-js-")
    server = build_js(find_binary(a.binary), work)
    bad = [s for s in range(a.seeds) if not run_seed(s, a.steps, server, a.verbose)]
    shutil.rmtree(work, ignore_errors=True)
    print(f"{a.seeds - len(bad)}/{a.seeds} seeds agree" + (f"; differing: {bad[:20]}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
