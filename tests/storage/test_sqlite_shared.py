"""Waiting for another process's lock on a shared SQLite file (Q-1, Q-3): try again in small steps
until the lock is free, give up with SQLite's own error at the timeout, never retry anything else."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiosqlite
import pytest

from mailbox_actors.platform.shared_sqlite import is_locked, retry_while_locked


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """Another process's connection to the file, in WAL like the shared files."""
    conn = sqlite3.connect(tmp_path / "shared.sqlite", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (n INTEGER)")
    yield conn
    conn.close()


@pytest.fixture
async def waiter(tmp_path: Path, holder: sqlite3.Connection) -> AsyncIterator[aiosqlite.Connection]:
    conn = await aiosqlite.connect(tmp_path / "shared.sqlite", isolation_level=None, timeout=0)
    yield conn
    await conn.close()


@pytest.mark.anyio
async def test_a_writer_waits_for_the_lock_then_writes(holder: sqlite3.Connection,
                                                       waiter: aiosqlite.Connection) -> None:
    """Q-1, Q-3: refused while another connection holds the write lock, tried again, and written
    once the holder lets go (here after the third refusal)."""
    holder.execute("BEGIN IMMEDIATE")
    refusals = 0

    async def insert() -> object:
        nonlocal refusals
        try:
            return await waiter.execute("INSERT INTO t VALUES (1)")
        except sqlite3.OperationalError:
            refusals += 1
            if refusals == 3:
                holder.execute("COMMIT")
            raise

    await retry_while_locked(insert, timeout_ms=5_000)
    assert refusals == 3
    assert holder.execute("SELECT n FROM t").fetchall() == [(1,)]


@pytest.mark.anyio
async def test_a_lock_held_past_the_timeout_raises_sqlites_error(
        holder: sqlite3.Connection, waiter: aiosqlite.Connection) -> None:
    """Q-1, Q-3: past the timeout the caller gets "database is locked" (the services map it to
    retryable unavailable), and nothing was written."""
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError) as info:
        await retry_while_locked(lambda: waiter.execute("INSERT INTO t VALUES (1)"), timeout_ms=20)
    assert is_locked(info.value)
    holder.execute("COMMIT")
    assert holder.execute("SELECT count(*) FROM t").fetchone() == (0,)


@pytest.mark.anyio
async def test_other_errors_are_not_retried(waiter: aiosqlite.Connection) -> None:
    """Only a lock is waited for: a bad statement fails on its first try."""
    tries = 0

    async def bad() -> object:
        nonlocal tries
        tries += 1
        return await waiter.execute("INSERT INTO nowhere VALUES (1)")

    with pytest.raises(sqlite3.OperationalError) as info:
        await retry_while_locked(bad, timeout_ms=5_000)
    assert tries == 1 and not is_locked(info.value)
