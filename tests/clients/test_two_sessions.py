"""Two real Claude Code CLI sessions in one mounted workspace at once (issue 22), by the plain
CLI with ``rewindfs hook`` (set up by ``rewindfs setup claude``): each session's prompts get
checkpoints of that session, and rewinding one session's turn in agent scope undoes that
session's work and leaves the other's, while tool scope restores only the session's tracked
files.

    bash tests/clients/install.sh
    REWINDFS_BIN=target/debug/rewindfs target/clients/venv/bin/python -m pytest -q \\
        -p no:cacheprovider tests/clients/test_two_sessions.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _cli() -> Path:
    import claude_agent_sdk  # the wheel bundles the CLI (versions.env pins both)

    return Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


def _rw(*args: str, cwd: str) -> str:
    from rewindfs_compare import rewindfs_bin

    out = subprocess.run([rewindfs_bin(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"rewindfs {' '.join(args)}: {out.stderr}"
    return out.stdout


def _socket_request(store: str, subtype: str, **fields: object) -> dict:
    sys.path.insert(0, str(HERE.parent.parent / "sdk" / "python"))
    from rewindfs import RewindfsClient

    with RewindfsClient(Path(store) / "control.sock") as c:
        return c.request(subtype, **fields)


def test_two_cli_sessions_in_one_tree_each_rewind_their_own_turns(tmp_path: Path) -> None:
    from rewindfs_compare import require_clients_and_mount, rewindfs_bin

    require_clients_and_mount()
    from fake_api import FakeAPI
    from run_session import offline_env

    ws, store, home = (str(tmp_path / d) for d in ("ws", "store", "home"))
    os.makedirs(ws)
    os.makedirs(home)
    Path(ws, "shared.txt").write_text("shared\n")
    script = {"turns": [
        {"match": "SESSION-A-ONE", "responses": [[{"tool": "Write", "input": {"file_path": f"{ws}/a.txt", "content": "a\n"}}]]},
        {"match": "SESSION-B-ONE", "responses": [
            [{"tool": "Write", "input": {"file_path": f"{ws}/b.txt", "content": "b\n"}}],
            [{"tool": "Bash", "input": {"command": "mkdir -p bdir && echo x > bdir/x.txt"}}],
        ]},
        {"match": "SESSION-A-TWO", "responses": [
            [{"tool": "Write", "input": {"file_path": f"{ws}/a2.txt", "content": "a2\n"}}],
            [{"tool": "Bash", "input": {"command": "echo from-a >> shared.txt"}}],
        ]},
    ]}
    api = FakeAPI(script, log_path=str(tmp_path / "api.jsonl")).start()
    subprocess.run([rewindfs_bin(), "mount", ws, "--store", store], check=True, timeout=60)
    try:
        _rw("setup", "claude", cwd=ws)
        env = {**os.environ, **offline_env(api.base_url, home)}
        base = [str(_cli()), "--dangerously-skip-permissions", "--output-format", "json", "-p"]
        results: dict[str, dict] = {}

        def run(name: str, prompt: str, resume: str | None = None) -> None:
            cmd = base + [prompt] + (["--resume", resume] if resume else [])
            out = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=180)
            assert out.returncode == 0, f"{name}: {out.stderr[-2000:]}"
            results[name] = json.loads(out.stdout)

        # The two sessions' first turns at the same time.
        threads = [threading.Thread(target=run, args=(n, p)) for n, p in
                   (("a1", "SESSION-A-ONE"), ("b1", "SESSION-B-ONE"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run("a2", "SESSION-A-TWO", results["a1"]["session_id"])
        sa, sb = results["a1"]["session_id"], results["b1"]["session_id"]
        assert sa != sb and results["a2"]["session_id"] == sa

        listed = _socket_request(store, "list_checkpoints")["checkpoints"]
        by_prompt = {c.get("prompt"): c for c in listed if c["kind"] == "message"}
        assert set(by_prompt) == {"SESSION-A-ONE", "SESSION-B-ONE", "SESSION-A-TWO"}, listed
        assert all(c["bound"] for c in by_prompt.values()), listed
        a1, b1 = by_prompt["SESSION-A-ONE"], by_prompt["SESSION-B-ONE"]
        assert (a1["sessionId"], b1["sessionId"]) == (sa, sb)
        status = _socket_request(store, "status")
        assert {s["sessionId"] for s in status["sessions"]} == {sa, sb}, status

        # Agent scope, session A's first turn: A's files go, B's stay; shared.txt only A changed.
        dry = _socket_request(store, "rewind_files", user_message_id=a1["uuid"], scope="agent", dry_run=True)
        changed = sorted(os.path.relpath(p, ws) for p in dry["filesChanged"])
        assert changed == ["a.txt", "a2.txt", "shared.txt"], dry
        assert dry["canRewind"] and not dry["conflicts"], dry
        _socket_request(store, "rewind_files", user_message_id=a1["uuid"], scope="agent")
        assert not Path(ws, "a.txt").exists() and not Path(ws, "a2.txt").exists()
        assert Path(ws, "shared.txt").read_text() == "shared\n"
        assert Path(ws, "b.txt").read_text() == "b\n" and Path(ws, "bdir/x.txt").read_text() == "x\n"
        _socket_request(store, "undo_rewind")
        assert Path(ws, "a2.txt").read_text() == "a2\n"

        # Tool scope, session B's turn: only B's tracked file.
        dry = _socket_request(store, "rewind_files", user_message_id=b1["uuid"], dry_run=True)
        assert [os.path.relpath(p, ws) for p in dry["filesChanged"]] == ["b.txt"], dry
        # Agent scope, session B: B's Write and its shell's directory; A's work stays.
        _socket_request(store, "rewind_files", user_message_id=b1["uuid"], scope="agent")
        assert not Path(ws, "b.txt").exists() and not Path(ws, "bdir").exists()
        assert Path(ws, "a.txt").read_text() == "a\n" and Path(ws, "a2.txt").read_text() == "a2\n"
        assert Path(ws, "shared.txt").read_text() == "shared\nfrom-a\n"
    finally:
        subprocess.run([rewindfs_bin(), "umount", ws], check=False, timeout=60)
        api.stop()
