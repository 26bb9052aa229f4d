"""The Python adapter with the real Agent SDK and CLI, started the way the first hour goes wrong
(issue 21 §1): the host process is already inside the project when it is mounted, and gives the
SDK ``cwd="."``. ``with_rewindfs`` must still start the CLI inside the mount (without it, the
CLI process's own cwd is the directory underneath, and ``register_cli`` refuses it, naming the
directory), what its shell commands write by relative paths must be recorded and tagged with
the host's session id (issue 22), and a rewind of the turn must take it back. (Measured: CLI
2.1.330 starts its Bash commands by the path of its cwd, so they reach the mount either way;
the check guards the CLI's own process.)

    bash tests/clients/install.sh
    REWINDFS_BIN=target/debug/rewindfs target/clients/venv/bin/python -m pytest -q \\
        -p no:cacheprovider tests/clients/test_adapter_underneath.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "sdk" / "python"))


def test_a_host_started_inside_the_project_still_runs_the_cli_inside_the_mount(tmp_path: Path) -> None:
    from rewindfs_compare import require_clients_and_mount, rewindfs_bin

    require_clients_and_mount()
    from claude_agent_sdk.types import ResultMessage
    from rewindfs import AsyncRewindfsClient
    from rewindfs.claude import register_cli, send_prompt, with_rewindfs
    from run_session import Session

    ws, store = str(tmp_path / "ws"), str(tmp_path / "store")
    os.makedirs(ws)
    Path(ws, "keep.txt").write_text("keep\n")
    scenario = {"steps": [{"prompt": "UNDERNEATH", "match": "UNDERNEATH", "responses": [
        [{"tool": "Bash", "input": {"command": "echo shell > shell.txt && echo more >> keep.txt"}}],
        [{"tool": "Write", "input": {"file_path": "{ws}/tool.txt", "content": "tool\n"}}],
    ]}]}
    before = os.getcwd()
    # The host is inside the project before it is mounted: its cwd is the directory underneath.
    os.chdir(ws)
    subprocess.run([rewindfs_bin(), "mount", ws, "--store", store], check=True, timeout=60)
    try:
        async def main() -> tuple[str, list[dict[str, Any]]]:
            rw = await AsyncRewindfsClient.connect(Path(store) / "control.sock")
            status = await rw.status()
            assert any(p["pid"] == os.getpid() for p in status["unprotectedProcesses"]), status

            def options_hook(o: Any) -> Any:
                # What the README's users write: the project is ".".
                return with_rewindfs(dataclasses.replace(o, cwd="."), rw, session_id="host-a")

            async def after_connect(client: Any) -> None:
                await register_cli(client, rw, "host-a")

            s = Session(scenario, ws, home=str(tmp_path / "home"), log_dir=str(tmp_path / "logs"),
                        emit=lambda e: None, options_hook=options_hook, after_connect=after_connect)
            s.api.start()
            try:
                await s.connect()
                turn = await send_prompt(s.client, rw, "host-a", "UNDERNEATH")
                async for m in s.client.receive_response():
                    if isinstance(m, ResultMessage):
                        break
                log = (await rw.request("log", raw=True))["entries"]
                dry = await rw.rewind_files(turn, dry_run=True, scope="agent")
                assert dry.canRewind, dry
                await rw.rewind_files(turn, scope="agent")
            finally:
                await s.close()
                s.api.stop()
                await rw.close()
            return turn, log

        turn, log = asyncio.run(main())
        by_path = {(e["path"], e["actor"]): e for e in log}
        shell = by_path.get(("shell.txt", "shell"))
        assert shell is not None, f"the CLI's shell wrote beneath the mount, unrecorded: {log}"
        assert shell["session"] == "host-a" and shell["checkpoint"] == turn, shell
        assert by_path.get(("keep.txt", "shell"), {}).get("session") == "host-a", log
        # The turn rewound: the shell's and the tool's files gone, keep.txt as it was.
        assert not Path(ws, "shell.txt").exists() and not Path(ws, "tool.txt").exists()
        assert Path(ws, "keep.txt").read_text() == "keep\n"
    finally:
        os.chdir(before)
        subprocess.run([rewindfs_bin(), "umount", ws], check=False, timeout=60)
