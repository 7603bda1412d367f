"""SQLite files that several processes share (the control database, the queues): waiting for the lock.

Their connections are opened with SQLite's busy timeout at 0 and wait here instead. SQLite's own
busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ms... between tries, so under steady contention from the
other node processes a waiter sleeps long past the moment the lock is free: ``BEGIN IMMEDIATE`` on
the queue file of a 3-node cluster waited 24-34 ms at p99 that way. Here a waiter tries again after
at most 2 ms until its timeout.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiosqlite
import anyio

__all__ = ["STEPS_S", "execute_when_unlocked", "is_locked", "retry_while_locked"]

T = TypeVar("T")
STEPS_S = (0.0005, 0.001, 0.001, 0.002)  # then 0.002 until the timeout


def is_locked(e: BaseException) -> bool:
    """Whether ``e`` is SQLite refusing for a lock another connection holds (SQLITE_BUSY)."""
    text = str(e)
    return isinstance(e, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


async def retry_while_locked(op: Callable[[], Awaitable[T]], timeout_ms: int) -> T:
    """``op()``, tried again while another process holds the lock, for up to ``timeout_ms``; then the
    last "database is locked" error.

    ``op`` must be safe to repeat after a refusal: ``BEGIN IMMEDIATE``, a statement in autocommit
    (refused before it changes anything), or a start-up PRAGMA.
    """
    deadline: float | None = None
    step = 0
    while True:
        try:
            return await op()
        except sqlite3.OperationalError as e:
            if not is_locked(e):
                raise
            now = anyio.current_time()
            if deadline is None:
                deadline = now + timeout_ms / 1000
            elif now >= deadline:
                raise
        await anyio.sleep(STEPS_S[min(step, len(STEPS_S) - 1)])
        step += 1


async def execute_when_unlocked(conn: aiosqlite.Connection, sql: str, timeout_ms: int) -> None:
    """Run a start-up statement while other processes may hold the lock. (Switching a fresh file to
    WAL takes an exclusive lock without consulting any busy handler, so two processes starting at
    once both see "database is locked"; trying again is the documented remedy.)"""
    await retry_while_locked(lambda: conn.execute(sql), timeout_ms)
