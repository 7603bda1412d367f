"""A SQLite file every node process of one machine shares (the control database, the queue file):
opening it whole (never recreated when damaged, OPS-2), WAL, its migrations, and how a statement
or a ``BEGIN IMMEDIATE`` transaction runs on it.

One aiosqlite connection per process and per file; a statement or transaction holds the
connection's lock (a transaction must not interleave with another task's statements). The
connection's thread runs as SCHED_BATCH (``_no_wakeup_preemption``). SQLite's busy
timeout is 0: a writer waits for another process's lock in small steps (``shared_sqlite``) and past
the timeout gets what ``map_error`` makes of SQLite's error. The owner says what the file is called
in messages, how its schema is brought up to date (``migrate``, called once the connection is open)
and whether statements run shielded from cancellation.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import anyio

from mailbox_actors.platform.shared_sqlite import execute_when_unlocked, retry_while_locked
from mailbox_actors.platform.sqlite_files import DamagedFile, check_whole, create_whole
from mailbox_actors.wire.errors import MailboxActorsError, PlatformError, PlatformErrorKind

__all__ = ["SharedSqliteFile"]

_PRAGMAS = ("PRAGMA busy_timeout = 0",
            "PRAGMA journal_mode = WAL",
            # WAL with synchronous=NORMAL survives a process crash (the node's failure model)
            # without an fsync per commit.
            "PRAGMA synchronous = NORMAL")


def _unchanged(e: sqlite3.Error) -> Exception:
    return e


def _no_wakeup_preemption() -> None:
    """Run in the connection's own thread: make it SCHED_BATCH (Linux), the same share of the CPU
    as before, but its wake-ups no longer preempt the thread that woke it. Each statement handed to
    the connection wakes its thread from the event loop; under load the kernel used to switch to
    the woken thread on the loop's CPU at once, and the loop then waited for a CPU again (the
    thread soon blocks on the GIL the loop holds). Where the policy is unknown or refused, nothing
    changes."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass


class SharedSqliteFile:
    """``await f.open()`` then ``await f.fetch(sql)`` or ``async with f.transaction() as conn:``."""

    def __init__(self, path: Path, *, what: str, busy_timeout_ms: int,
                 migrate: Callable[[SharedSqliteFile], Awaitable[None]],
                 pragmas: Sequence[str] = (),
                 map_error: Callable[[sqlite3.Error], Exception] = _unchanged,
                 shielded: bool = False,
                 not_open: Callable[[], Exception] | None = None) -> None:
        self.path = Path(path)
        self.what = what
        self.busy_timeout_ms = busy_timeout_ms
        self._migrate = migrate
        self._pragmas = (*_PRAGMAS, *pragmas)
        self._map_error = map_error
        self._shielded = shielded
        self._not_open = not_open
        self._conn: aiosqlite.Connection | None = None
        # A free lock is taken without a turn of the loop (anyio yields one by default): the
        # statement's hand-over to the thread follows at once, and on a busy loop a turn is a
        # wait at the back of its ready queue. Callers that find it held still queue in order.
        self._lock = anyio.Lock(fast_acquire=True)

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    async def open(self) -> None:
        """Check the file is whole (or create it whole), connect, set WAL, migrate."""
        if self._conn is not None:
            return
        try:
            # A damaged file stops here, never recreated (OPS-2); a new one appears whole.
            check_whole(self.path, self.what)
            create_whole(self.path)
            conn = await aiosqlite.connect(self.path, timeout=0, isolation_level=None)
        except (sqlite3.Error, OSError) as e:
            raise self._unopenable(e) from e
        try:
            # aiosqlite runs a call in the connection's thread only through _execute (no public
            # form): the policy must be set from that thread, which has no name to find it by.
            await conn._execute(_no_wakeup_preemption)  # type: ignore[no-untyped-call]
            for pragma in self._pragmas:
                await execute_when_unlocked(conn, pragma, self.busy_timeout_ms)
            self._conn = conn
            await self._migrate(self)
        except BaseException as e:
            self._conn = None
            with anyio.CancelScope(shield=True):
                await conn.close()
            if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError):
                raise DamagedFile(self.path, self.what, type(e).__name__) from e
            if isinstance(e, sqlite3.Error):
                raise self._unopenable(e) from e
            raise

    async def close(self) -> None:
        """Wait for the running statement or transaction, then close; twice is harmless."""
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                with anyio.CancelScope(shield=True):
                    await conn.close()

    def _require(self) -> aiosqlite.Connection:
        if self._conn is None:
            if self._not_open is not None:
                raise self._not_open()
            raise PlatformError(PlatformErrorKind.UNAVAILABLE, self.what, "not_open",
                                f"the {self.what} is not open")
        return self._conn

    async def fetch(self, sql: str, params: Sequence[Any] | Any = ()) -> list[Any]:
        """One statement in its own (implicit) transaction; its rows."""
        async with self._lock:
            conn = self._require()
            with anyio.CancelScope(shield=self._shielded):
                try:
                    rows = await retry_while_locked(lambda: conn.execute_fetchall(sql, params),
                                                    self.busy_timeout_ms)
                except sqlite3.Error as e:
                    raise self._map_error(e) from e
        return list(rows)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """``BEGIN IMMEDIATE`` (the write lock first, so the wait for it is covered and the
        snapshot never stale); committed on success, rolled back on any failure."""
        async with self._lock:
            conn = self._require()
            with anyio.CancelScope(shield=self._shielded):
                try:
                    await retry_while_locked(lambda: conn.execute("BEGIN IMMEDIATE"),
                                             self.busy_timeout_ms)
                    yield conn
                    await conn.execute("COMMIT")
                except BaseException as e:
                    with anyio.CancelScope(shield=True):
                        await conn.rollback()  # a no-op when BEGIN failed or COMMIT landed
                    if isinstance(e, sqlite3.Error):
                        raise self._map_error(e) from e
                    raise

    def _unopenable(self, e: sqlite3.Error | OSError) -> MailboxActorsError:
        return PlatformError(PlatformErrorKind.INTERNAL, self.what, "unopenable",
                             f"the {self.what} at {self.path} cannot be opened",
                             details={"sqlite": str(e)})
