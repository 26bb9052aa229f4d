#!/usr/bin/env python3
"""Records the real Claude Agent SDK's answers into scenario files, as ``expect``.

    $REWINDFS_CLIENTS_DIR/venv/bin/python tests/clients/record_expect.py tests/clients/scenarios/*.json

Runs each scenario with :class:`run_session.Session` (the SDK's own ``rewind_files``, the
CLI version pinned in versions.env) in a fresh temporary workspace, then writes back into
the file, on every rewind / rewind_public / control / tree step (and shell steps marked
``"record": true``), an ``expect`` holding what the SDK answered, with the workspace path
written as ``{ws}``. ``run_session.py --check`` compares later runs (e.g. through rewindfs)
with it. Re-run it after changing versions.env, and review the diff.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run_session import TREE_FIELDS, Session  # noqa: E402


def unsubst(obj, ws: str):
    if isinstance(obj, str):
        return obj.replace(ws, "{ws}")
    if isinstance(obj, list):
        return [unsubst(x, ws) for x in obj]
    if isinstance(obj, dict):
        return {k: unsubst(v, ws) for k, v in obj.items()}
    return obj


def record(path: Path) -> None:
    scenario = json.loads(path.read_text())
    key = "steps" if "steps" in scenario else "turns"
    for st in scenario[key]:
        st.pop("expect", None)
    base = Path(tempfile.mkdtemp(prefix="rewindfs-record-"))
    try:
        s = Session(scenario, str(base / "ws"), home=str(base / "home"), log_dir=str(base / "logs"),
                    emit=lambda e: None)
        results = asyncio.run(s.run())
        for st, r in zip(scenario[key], results):
            if r["kind"] in ("rewind", "rewind_public", "control"):
                st["expect"] = unsubst(r.get("response") if r.get("ok") else {"error": r.get("error")}, s.ws)
            elif r["kind"] == "tree":
                st["expect"] = {p: {k: v for k, v in e.items()
                                    if k in TREE_FIELDS and not (k == "nlink" and e.get("type") == "dir")}
                                for p, e in unsubst(r["entries"], s.ws).items()}
            elif r["kind"] == "shell" and st.get("record"):
                st["expect"] = unsubst(r["out"], s.ws)
        path.write_text(json.dumps(scenario, indent=1) + "\n")
        print(f"recorded {path.name}: {sum(1 for st in scenario[key] if 'expect' in st)} expectations")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    for p in sys.argv[1:]:
        record(Path(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
