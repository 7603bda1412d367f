"""A SQLite file every node process of one machine shares (the control database, the queue file):
opening it whole (never recreated when damaged, OPS-2), WAL, its migrations, and how a statement
or a ``BEGIN IMMEDIATE`` transaction runs on it.

One connection per process and per file, used on the event loop's thread (``SharedConnection``):
a statement here is a point write or a short read of a small file, shorter than a hand-off to a
worker thread and back (aiosqlite's, until session 19: two GIL hand-offs a statement, about a
quarter of the SMTP door's CPU with the outbox's publishing and the webhook consumer's acks). A
statement or transaction holds the connection's lock (a transaction must not interleave with
another task's statements); a statement while no transaction is open runs at once, without
taking it. SQLite's busy timeout is 0, so no statement ever waits inside SQLite: a writer waits
for another process's lock in small steps (``shared_sqlite``) on the loop and past the timeout
gets what ``map_error`` makes of SQLite's error.

The file's log is checkpointed off the loop: the connection's automatic checkpoint (which runs
inside a commit, with its fsyncs) is off, and after every ``CHECKPOINT_EVERY`` writes a worker
thread checkpoints the log (PASSIVE, on a connection of its own, never two at once), as SQLite's
would have at about the same size. Closing waits for a running checkpoint and closes in a thread.

The owner says what the file is called in messages, how its schema is brought up to date
(``migrate``, called once the connection is open) and whether statements run shielded from
cancellation.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from mailbox_actors.platform.shared_sqlite import (
    execute_when_unlocked,
    is_locked,
    retry_while_locked,
)
from mailbox_actors.platform.sqlite_files import DamagedFile, check_whole, create_whole
from mailbox_actors.wire.errors import MailboxActorsError, PlatformError, PlatformErrorKind

__all__ = ["CHECKPOINT_EVERY", "SharedConnection", "SharedSqliteFile"]

_PRAGMAS = ("PRAGMA busy_timeout = 0",
            "PRAGMA journal_mode = WAL",
            # WAL with synchronous=NORMAL survives a process crash (the node's failure model)
            # without an fsync per commit.
            "PRAGMA synchronous = NORMAL",
            # Checkpoints run in a worker thread (module docstring), not inside a commit here.
            "PRAGMA wal_autocheckpoint = 0")
# Writes (statements that changed rows, commits) between two checkpoints: each writes a few
# pages, so the log is checkpointed at a few hundred to a thousand pages, about where SQLite's
# own automatic checkpoint (1,000 pages) would have run.
CHECKPOINT_EVERY = 256


class SharedConnection:
    """The file's connection as its callers await it (``execute``, ``execute_fetchall``): each
    statement runs at once on the calling thread; nothing is handed to another thread."""

    __slots__ = ("db",)

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    async def execute(self, sql: str, parameters: Sequence[Any] | Any = ()) -> sqlite3.Cursor:
        return self.db.execute(sql, parameters)

    async def execute_fetchall(self, sql: str, parameters: Sequence[Any] | Any = ()
                               ) -> list[Any]:
        return self.db.execute(sql, parameters).fetchall()

    async def rollback(self) -> None:
        self.db.rollback()


def _unchanged(e: sqlite3.Error) -> Exception:
    return e


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
        self._conn: SharedConnection | None = None
        self._lock = anyio.Lock()
        self._writes = 0  # since the last checkpoint was started
        self._checkpointing: asyncio.Future[None] | None = None
        self._checkpointer: sqlite3.Connection | None = None  # used in worker threads only

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
            # Closed in a worker thread (``close``): not bound to the thread that made it.
            conn = SharedConnection(sqlite3.connect(self.path, timeout=0, isolation_level=None,
                                                    check_same_thread=False))
        except (sqlite3.Error, OSError) as e:
            raise self._unopenable(e) from e
        try:
            for pragma in self._pragmas:
                await execute_when_unlocked(conn.execute, pragma, self.busy_timeout_ms)
            self._conn = conn
            await self._migrate(self)
        except BaseException as e:
            self._conn = None
            conn.db.close()
            if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError):
                raise DamagedFile(self.path, self.what, type(e).__name__) from e
            if isinstance(e, sqlite3.Error):
                raise self._unopenable(e) from e
            raise

    async def close(self) -> None:
        """Wait for the running statement or transaction, then close; twice is harmless."""
        async with self._lock:
            conn, self._conn = self._conn, None
            with anyio.CancelScope(shield=True):
                if self._checkpointing is not None:
                    await asyncio.shield(self._checkpointing)
                checkpointer, self._checkpointer = self._checkpointer, None
                for db in (checkpointer, None if conn is None else conn.db):
                    if db is not None:  # the last close checkpoints the log: not on the loop
                        await anyio.to_thread.run_sync(db.close)

    def _require(self) -> SharedConnection:
        if self._conn is None:
            if self._not_open is not None:
                raise self._not_open()
            raise PlatformError(PlatformErrorKind.UNAVAILABLE, self.what, "not_open",
                                f"the {self.what} is not open")
        return self._conn

    async def fetch(self, sql: str, params: Sequence[Any] | Any = ()) -> list[Any]:
        """One statement in its own (implicit) transaction; its rows."""
        conn = self._require()
        if not self._lock.locked():
            # No transaction is open on the connection, and none can open before this returns
            # (no await until then): the statement runs now, without the lock.
            changes = conn.db.total_changes
            try:
                rows = conn.db.execute(sql, params).fetchall()
            except sqlite3.Error as e:
                if not is_locked(e):
                    raise self._map_error(e) from e
                # another process holds the file's lock: wait for it below, holding ours
            else:
                if conn.db.total_changes != changes:
                    self._wrote()
                return rows
        async with self._lock:
            conn = self._require()
            with anyio.CancelScope(shield=self._shielded):
                changes = conn.db.total_changes
                try:
                    rows = await retry_while_locked(lambda: conn.execute_fetchall(sql, params),
                                                    self.busy_timeout_ms)
                except sqlite3.Error as e:
                    raise self._map_error(e) from e
                if conn.db.total_changes != changes:
                    self._wrote()
        return rows

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SharedConnection]:
        """``BEGIN IMMEDIATE`` (the write lock first, so the wait for it is covered and the
        snapshot never stale); committed on success, rolled back on any failure."""
        async with self._lock:
            conn = self._require()
            with anyio.CancelScope(shield=self._shielded):
                try:
                    await retry_while_locked(lambda: conn.execute("BEGIN IMMEDIATE"),
                                             self.busy_timeout_ms)
                    yield conn
                    conn.db.execute("COMMIT")
                except BaseException as e:
                    conn.db.rollback()  # a no-op when BEGIN failed or COMMIT landed
                    if isinstance(e, sqlite3.Error):
                        raise self._map_error(e) from e
                    raise
                self._wrote()

    def _wrote(self) -> None:
        """A write was committed: every ``CHECKPOINT_EVERY`` writes, a checkpoint in a worker
        thread (unless one is running: the next write starts the next)."""
        self._writes += 1
        if self._writes < CHECKPOINT_EVERY or self._checkpointing is not None:
            return
        self._writes = 0
        future = asyncio.get_running_loop().run_in_executor(None, self._checkpoint)
        self._checkpointing = future
        future.add_done_callback(self._checkpointed)

    def _checkpointed(self, future: asyncio.Future[None]) -> None:
        self._checkpointing = None
        if not future.cancelled():
            future.exception()  # retrieved: ``_checkpoint`` raises nothing of its own

    def _checkpoint(self) -> None:
        """In a worker thread: the log's committed frames copied into the file (PASSIVE: it
        waits for no reader or writer, and leaves what they still need for the next one)."""
        try:
            if self._checkpointer is None:
                self._checkpointer = sqlite3.connect(self.path, timeout=0, isolation_level=None,
                                                     check_same_thread=False)
                self._checkpointer.execute("PRAGMA synchronous = NORMAL")
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            pass  # another process checkpoints now, or the disk is full: the next one tries

    def _unopenable(self, e: sqlite3.Error | OSError) -> MailboxActorsError:
        return PlatformError(PlatformErrorKind.INTERNAL, self.what, "unopenable",
                             f"the {self.what} at {self.path} cannot be opened",
                             details={"sqlite": str(e)})
