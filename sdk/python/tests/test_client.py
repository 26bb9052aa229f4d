from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from rewindfs import AsyncRewindfsClient, RewindfsClient, RewindfsError, find_socket

MOUNTINFO = (
    "36 35 98:0 / /work/my\\040proj rw,relatime - fuse.rewindfs /var/st\\040ore rw\n"
    "37 35 98:0 / /work/my\\040proj/sub rw - ext4 /dev/sda1 rw\n"
    "38 35 98:0 / /proc rw - proc proc rw\n"
)


def test_the_socket_is_found_like_the_cli_finds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REWINDFS_SOCKET", raising=False)
    assert find_socket("/x.sock") == Path("/x.sock")
    assert find_socket(cwd="/work/my proj/src", mountinfo=MOUNTINFO) == Path("/var/st ore/control.sock")
    with pytest.raises(RewindfsError, match="not inside a rewindfs mount"):
        find_socket(cwd="/elsewhere", mountinfo=MOUNTINFO)
    monkeypatch.setenv("REWINDFS_SOCKET", "/env.sock")
    assert find_socket(cwd="/elsewhere", mountinfo=MOUNTINFO) == Path("/env.sock")


def test_rewind_files_behaves_like_the_sdk(mounted) -> None:
    proj, store = mounted
    (proj / "keep.txt").write_text("v0\n")
    with RewindfsClient(store / "control.sock") as c:
        c.register_agent(os.getpid())  # this process plays the agent: its writes are `tool`
        turn = str(uuid.uuid4())
        assert c.begin_message("s1", turn)["checkpoint"] == turn
        (proj / "new.py").write_text("print('hi')\n")
        (proj / "keep.txt").write_text("v1\n")
        dry = c.rewind_files(turn, dry_run=True)
        assert dry.canRewind and sorted(dry.filesChanged) == [str(proj / "keep.txt"), str(proj / "new.py")]
        assert (dry.insertions, dry.deletions) == (1, 2)
        real = c.rewind_files(turn)
        assert real.canRewind and real.skippedLinks == 0
        assert not (proj / "new.py").exists() and (proj / "keep.txt").read_text() == "v0\n"
        c.undo_rewind()
        assert (proj / "new.py").exists()
        assert c.redo_rewind(dry_run=True)["canRewind"]
        assert c.redo_rewind()["redone"] and not (proj / "new.py").exists()
        assert c.undo_rewind()["undoable"] == 0 and (proj / "new.py").exists()
        missing = str(uuid.uuid4())
        assert c.rewind_files(missing, dry_run=True).error == "No file checkpoint found for this message."
        with pytest.raises(RewindfsError, match=r"^No file checkpoint found for this message\.$"):
            c.rewind_files(missing)
        assert any(cp["uuid"] == turn for cp in c.list_checkpoints())
        assert c.status()["currentCheckpoint"]
        assert "new.py" in c.diff(turn)
        assert any(e["path"] == "new.py" for e in c.log())


def test_the_async_client_speaks_the_same_protocol(mounted) -> None:
    proj, store = mounted

    async def main() -> None:
        async with await AsyncRewindfsClient.connect(store / "control.sock") as c:
            turn = str(uuid.uuid4())
            await c.begin_message("s2", turn)
            (proj / "a.txt").write_text("a\n")
            r = await c.rewind_files(turn, dry_run=True, scope="all")
            assert r.filesChanged == [str(proj / "a.txt")]
            r = await c.rewind_files(turn, scope="all")
            assert r.canRewind and not (proj / "a.txt").exists()
            with pytest.raises(RewindfsError):
                await c.rewind_files("not-a-uuid")

    asyncio.run(main())
