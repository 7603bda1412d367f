"""Opening SQLite files that several processes share (the control database, the queues)."""

from __future__ import annotations

import sqlite3

import aiosqlite
import anyio

__all__ = ["execute_when_unlocked"]


async def execute_when_unlocked(conn: aiosqlite.Connection, sql: str, timeout_ms: int) -> None:
    """Run a start-up statement, retrying while another process holds the lock.

    Switching a fresh file to WAL takes an exclusive lock without consulting the busy handler, so
    two processes starting at once can see "database is locked" at once; waiting briefly and
    trying again is the documented remedy.
    """
    waited = 0.0
    delay = 0.005
    while True:
        try:
            await conn.execute(sql)
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or waited * 1000 >= timeout_ms:
                raise
        await anyio.sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.1)
