"""The control database's connection (Q-3): opening the shared file (whole, WAL, never recreated
when damaged), its migrations, and the building blocks every record is read and written with:
one ``BEGIN IMMEDIATE`` transaction at a time, waits for other processes' locks
(``shared_sqlite``), SQLite's errors mapped to SPEC section 5's codes. The records are
``database``'s."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import aiosqlite
import anyio

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.control.schema import META, MIGRATIONS
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.shared_sqlite import execute_when_unlocked, retry_while_locked
from mailbox_actors.platform.sqlite_files import DamagedFile, check_whole, create_whole
from mailbox_actors.platform.sqlite_files import is_disk_full as _is_disk_full
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["ControlConnection", "ControlDbTooNew", "mapped_error"]

_log = get_logger("mailbox_actors.control_db")
T = TypeVar("T")


class ControlDbTooNew(MailboxActorsError):
    """The file was migrated by newer code; it is refused, never downgraded."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(ErrorCode.INTERNAL_ERROR,
                         f"control database has schema_version {found}; this code knows up to {known}",
                         details={"schema_version": found, "known": known},
                         fix="Run the newer mailbox-actors that wrote this control database.")


class ControlConnection:
    """One process's connection to the control database. Safe for many tasks at once."""

    def __init__(self, path: Path, *, clock: Clock, ids: Ids, busy_timeout_ms: int = 5_000,
                 migrations: Sequence[Sequence[str]] = MIGRATIONS) -> None:
        self.path = Path(path)
        self._clock = clock
        self._ids = ids
        self._busy_timeout_ms = busy_timeout_ms
        self._migrations = tuple(tuple(m) for m in migrations)
        self._conn: aiosqlite.Connection | None = None
        # One connection per instance: a transaction must not interleave with another task's SQL.
        self._lock = anyio.Lock()

    # ---- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, switch to WAL and bring the schema to the newest version (refusing newer files)."""
        if self._conn is not None:
            raise RuntimeError("ControlDb is already open")
        try:
            # A damaged file stops here, never recreated (OPS-2); a new one appears whole.
            check_whole(self.path, "control database")
            create_whole(self.path)
            # No SQLite busy timeout: sqlite_shared waits for other processes' locks in finer steps.
            conn = await aiosqlite.connect(self.path, timeout=0, isolation_level=None)
        except (sqlite3.Error, OSError) as e:
            raise _unopenable(self.path, e) from e
        try:
            for pragma in ("PRAGMA busy_timeout = 0",
                           "PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL",
                           "PRAGMA foreign_keys = ON"):
                await execute_when_unlocked(conn, pragma, self._busy_timeout_ms)
            self._conn = conn
            await self._migrate()
        except BaseException as e:
            self._conn = None
            with anyio.CancelScope(shield=True):
                await conn.close()
            if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError):
                raise DamagedFile(self.path, "control database", type(e).__name__) from e
            if isinstance(e, sqlite3.Error):
                raise _unopenable(self.path, e) from e
            raise

    async def close(self) -> None:
        """Wait for the running statement or transaction, then close; closing twice is harmless."""
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def schema_version(self) -> int:
        row = await self.fetch_one("SELECT v FROM meta WHERE k = 'schema_version'")
        return 0 if row is None else int(row[0])

    async def _migrate(self) -> None:
        known = len(self._migrations)
        # Fast path without the write lock: a node restarting against a current file writes nothing.
        if await self.fetch_one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"):
            found = await self.schema_version()
            if found > known:
                raise ControlDbTooNew(found, known)
            if found == known:
                return
        async with self._write() as conn:
            # Re-read under BEGIN IMMEDIATE: another process may have migrated meanwhile.
            await conn.execute(META)
            rows = list(await conn.execute_fetchall(
                "SELECT v FROM meta WHERE k = 'schema_version'"))
            found = int(rows[0][0]) if rows else 0
            if found > known:
                raise ControlDbTooNew(found, known)
            for statements in self._migrations[found:]:
                for stmt in statements:
                    await conn.execute(stmt)
            if found != known:
                await conn.execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('schema_version', ?)",
                                   (str(known),))
        if found != known:
            _log.info("control_db.migrated", path=str(self.path), from_version=found, to_version=known)

    # ---- the building blocks --------------------------------------------------------------------

    def _require_conn(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise MailboxActorsError(ErrorCode.UNAVAILABLE, "the control database is not open")
        return self._conn

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any failure."""
        async with self._lock:
            conn = self._require_conn()
            try:
                await retry_while_locked(lambda: conn.execute("BEGIN IMMEDIATE"),
                                         self._busy_timeout_ms)
                yield conn
                await conn.execute("COMMIT")
            except BaseException as e:
                with anyio.CancelScope(shield=True):
                    await conn.rollback()  # a no-op when BEGIN failed or COMMIT already landed
                if isinstance(e, sqlite3.Error):
                    raise mapped_error(e) from e
                raise

    async def batch(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run every statement in one transaction; if any fails, none of them took effect."""
        async with self._write() as conn:
            for sql, params in statements:
                await conn.execute(sql, params)

    async def transaction(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction: read-then-write adapters
        (Post's executor) need their reads and writes in one."""
        async with self._write() as conn:
            return await fn(conn)

    async def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        async with self._lock:
            conn = self._require_conn()
            try:
                rows = await retry_while_locked(lambda: conn.execute_fetchall(sql, params),
                                                self._busy_timeout_ms)
            except sqlite3.Error as e:
                raise mapped_error(e) from e
        return [tuple(r) for r in rows]

    async def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = await self.fetch_all(sql, params)
        return rows[0] if rows else None


def mapped_error(e: sqlite3.Error) -> MailboxActorsError:
    """SQLite's messages name tables and constraints, never bound values, so they are safe to carry."""
    if isinstance(e, sqlite3.IntegrityError):
        return MailboxActorsError(ErrorCode.CONFLICT, "a control database constraint refused the write",
                                  details={"sqlite": str(e)})
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        return MailboxActorsError(ErrorCode.UNAVAILABLE, "the control database stayed locked past the "
                                  "busy timeout", details={"sqlite": str(e)})
    if isinstance(e, sqlite3.OperationalError) and _is_disk_full(e):
        # OPS-3: the disk, not the request: retryable, and reads still work.
        return MailboxActorsError(ErrorCode.UNAVAILABLE, "the control database cannot be written "
                                  "now (the disk is full or failing)", details={"sqlite": str(e)})
    return MailboxActorsError(ErrorCode.INTERNAL_ERROR, "control database error",
                              details={"sqlite": str(e)})


def _unopenable(path: Path, e: sqlite3.Error | OSError) -> MailboxActorsError:
    return MailboxActorsError(ErrorCode.INTERNAL_ERROR,
                              f"the control database at {path} cannot be opened",
                              details={"sqlite": str(e)})
