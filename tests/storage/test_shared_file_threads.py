"""The shared SQLite files' connection threads (Q-1, IN-5): each aiosqlite connection's own thread
runs under SCHED_BATCH, so handing it a statement never makes it preempt the event loop that woke
it; the loop's thread keeps its policy, and a system that refuses the policy still opens the file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mailbox_actors.platform.sqlite import shared_file
from mailbox_actors.platform.sqlite.shared_file import SharedSqliteFile

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="SCHED_BATCH and per-thread policies are Linux's")


async def _nothing(_f: SharedSqliteFile) -> None:
    return None


def _file(tmp_path: Path) -> SharedSqliteFile:
    return SharedSqliteFile(tmp_path / "shared.sqlite", what="test file", busy_timeout_ms=100,
                            migrate=_nothing)


@pytest.mark.anyio
async def test_the_connections_thread_runs_as_sched_batch_and_the_loops_does_not(
        tmp_path: Path) -> None:
    """IN-5: the thread that runs the file's statements is SCHED_BATCH; the caller's is not."""
    f = _file(tmp_path)
    loop_policy = os.sched_getscheduler(0)
    await f.open()
    try:
        assert await f._require()._execute(os.sched_getscheduler, 0) == os.SCHED_BATCH
        assert os.sched_getscheduler(0) == loop_policy != os.SCHED_BATCH
        assert await f.fetch("SELECT 1") == [(1,)]
    finally:
        await f.close()


@pytest.mark.anyio
async def test_a_refused_policy_still_opens_the_file(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Q-1: where the policy cannot be set, the file opens and serves as before."""
    def refuse(*_args: object) -> None:
        raise PermissionError("no")

    monkeypatch.setattr(shared_file.os, "sched_setscheduler", refuse)
    f = _file(tmp_path)
    await f.open()
    try:
        assert await f._require()._execute(os.sched_getscheduler, 0) != os.SCHED_BATCH
        assert await f.fetch("SELECT 2") == [(2,)]
    finally:
        await f.close()
