"""The shared SQLite files' connection on the event loop (Q-1, Q-3): statements run on the calling
thread, a transaction stays whole while other tasks' statements wait for it, and the log is
checkpointed in a worker thread every ``CHECKPOINT_EVERY`` writes, never inside a commit."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from mailbox_actors.platform.sqlite import shared_file
from mailbox_actors.platform.sqlite.shared_file import CHECKPOINT_EVERY, SharedSqliteFile


async def _migrate(f: SharedSqliteFile) -> None:
    async with f.transaction() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER, pad BLOB)")


@pytest.fixture
async def file(tmp_path: Path) -> AsyncIterator[SharedSqliteFile]:
    f = SharedSqliteFile(tmp_path / "shared.sqlite", what="test file", busy_timeout_ms=2_000,
                         migrate=_migrate)
    await f.open()
    yield f
    await f.close()


@pytest.mark.anyio
async def test_statements_run_on_the_calling_thread(file: SharedSqliteFile) -> None:
    """Q-3: a statement and a transaction's statements run on the event loop's thread: no
    hand-off to a worker thread and back."""
    seen: list[int] = []
    conn = file._require()
    conn.db.create_function("thread_id", 0, lambda: seen.append(threading.get_ident()) or 0)
    await file.fetch("SELECT thread_id()")
    async with file.transaction() as tx:
        await tx.execute_fetchall("SELECT thread_id()")
    assert seen == [threading.get_ident()] * 2


@pytest.mark.anyio
async def test_a_statement_waits_for_another_tasks_transaction(file: SharedSqliteFile) -> None:
    """Q-3: a statement from another task while a transaction is open (its owner awaiting
    something) runs after it, never inside it: the transaction's rollback leaves it written."""
    order: list[str] = []

    async def other() -> None:
        await file.fetch("INSERT INTO t (n) VALUES (2)")
        order.append("other")

    with pytest.raises(RuntimeError):
        async with file.transaction() as tx:
            await tx.execute("INSERT INTO t (n) VALUES (1)")
            async with anyio.create_task_group() as tg:
                tg.start_soon(other)
                await anyio.sleep(0.01)  # the other task runs meanwhile, and waits
                order.append("rolled back")
                tg.cancel_scope.cancel()  # (its wait is given up below by the rollback's end)
            raise RuntimeError("roll back")
    await other()
    assert order == ["rolled back", "other"]
    assert await file.fetch("SELECT n FROM t") == [(2,)]


@pytest.mark.anyio
async def test_the_log_is_checkpointed_in_a_worker_thread(file: SharedSqliteFile,
                                                          tmp_path: Path) -> None:
    """Q-1: commits never checkpoint the log themselves (no fsync on the loop); after
    CHECKPOINT_EVERY writes a worker thread copies the log into the file."""
    db = tmp_path / "shared.sqlite"
    checkpoints: list[int] = []
    real = shared_file.SharedSqliteFile._checkpoint

    def recorded(self: SharedSqliteFile) -> None:
        checkpoints.append(threading.get_ident())
        real(self)

    before = db.stat().st_size
    file._writes = 0  # the migration's commit counted too
    for n in range(CHECKPOINT_EVERY - 1):
        await file.fetch("INSERT INTO t (n, pad) VALUES (?, zeroblob(20000))", (n,))
    # Past 1,000 pages (SQLite's own checkpoint would have run): all still in the log.
    assert db.stat().st_size == before
    file._checkpoint = recorded.__get__(file)  # type: ignore[method-assign]
    await file.fetch("INSERT INTO t (n, pad) VALUES (-1, zeroblob(20000))")
    running = file._checkpointing
    assert running is not None
    await asyncio.shield(running)
    assert checkpoints and checkpoints[0] != threading.get_ident()
    assert db.stat().st_size > before + CHECKPOINT_EVERY * 20000
    reader = sqlite3.connect(db)
    try:
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (CHECKPOINT_EVERY,)
    finally:
        reader.close()


@pytest.mark.anyio
async def test_close_waits_for_a_running_checkpoint(tmp_path: Path) -> None:
    """Q-1: closing while a checkpoint runs waits for it, then closes both connections; the
    file opens again with every write in it."""
    path = tmp_path / "shared.sqlite"
    f = SharedSqliteFile(path, what="test file", busy_timeout_ms=2_000, migrate=_migrate)
    await f.open()
    for n in range(CHECKPOINT_EVERY):
        await f.fetch("INSERT INTO t (n) VALUES (?)", (n,))
    assert f._checkpointing is not None
    await f.close()
    assert f._checkpointing is None and f._checkpointer is None
    await f.open()
    try:
        assert await f.fetch("SELECT count(*) FROM t") == [(CHECKPOINT_EVERY,)]
    finally:
        await f.close()
