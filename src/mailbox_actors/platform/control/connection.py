"""The control database's connection (Q-3, CL-7): where the records live (a ``SharedStore``: the
shared SQLite file, or PostgreSQL), its migrations on the SQLite file, and the building blocks
every record is read and written with: one transaction at a time per call, SQLite's errors mapped
to SPEC section 5's codes (PostgreSQL's are mapped by its store). The records are ``database``'s.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import aiosqlite

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.control.schema import META, MIGRATIONS
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.shared_store import SharedStore, Tx
from mailbox_actors.platform.sqlite.shared_file import SharedSqliteFile
from mailbox_actors.platform.sqlite.store import SqliteStore
from mailbox_actors.platform.sqlite_files import is_disk_full as _is_disk_full
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError, PlatformError, PlatformErrorKind

__all__ = ["ControlConnection", "ControlDbTooNew", "mapped_error"]

_log = get_logger("mailbox_actors.control_db")
T = TypeVar("T")


class ControlDbTooNew(PlatformError):
    """The file was migrated by newer code; it is refused, never downgraded."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(PlatformErrorKind.INTERNAL, "control_db", "schema_too_new",
                         f"control database has schema_version {found}; this code knows up to {known}",
                         details={"schema_version": found, "known": known},
                         fix="Run the newer mailbox-actors that wrote this control database.")


class ControlConnection:
    """One process's connection to the control database. Safe for many tasks at once.

    ``path`` is the shared SQLite file, or a ``SharedStore`` already made (PostgreSQL's:
    ``platform.control.postgres``)."""

    def __init__(self, path: Path | SharedStore, *, clock: Clock, ids: Ids,
                 busy_timeout_ms: int = 5_000,
                 migrations: Sequence[Sequence[str]] = MIGRATIONS) -> None:
        self._clock = clock
        self._ids = ids
        self._migrations = tuple(tuple(m) for m in migrations)
        self._file: SharedSqliteFile | None = None
        self._opened = False
        if isinstance(path, str | Path):
            self._file = SharedSqliteFile(Path(path), what="control database",
                                          busy_timeout_ms=busy_timeout_ms, migrate=self._migrate,
                                          pragmas=("PRAGMA foreign_keys = ON",),
                                          map_error=mapped_error)
            self.store: SharedStore = SqliteStore(self._file)
            self.path: Path | None = self._file.path
        else:
            self.store = path
            self.path = None
        self._sql = self.store.dialect

    @property
    def where(self) -> str:
        return self.store.where

    # ---- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, and bring the schema to the newest version (refusing newer ones)."""
        if self._opened:
            raise RuntimeError("ControlDb is already open")
        await self.store.open()
        self._opened = True

    async def close(self) -> None:
        """Wait for the running statement or transaction, then close; closing twice is harmless."""
        if self._opened:
            self._opened = False
            await self.store.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def schema_version(self) -> int:
        row = await self.fetch_one("SELECT v FROM meta WHERE k = 'schema_version'")
        return 0 if row is None else int(row[0])

    async def _migrate(self, file: SharedSqliteFile) -> None:
        known = len(self._migrations)
        # Fast path without the write lock: a node restarting against a current file writes nothing.
        if await file.fetch("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"):
            rows = await file.fetch("SELECT v FROM meta WHERE k = 'schema_version'")
            found = int(rows[0][0]) if rows else 0
            if found > known:
                raise ControlDbTooNew(found, known)
            if found == known:
                return
        async with file.transaction() as conn:
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
            _log.info("control_db.migrated", path=str(file.path), from_version=found,
                      to_version=known)

    # ---- the building blocks --------------------------------------------------------------------

    async def run(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """``fn(tx)`` in one transaction (on PostgreSQL run again whole on a dead connection)."""
        if not self._opened:
            raise PlatformError(PlatformErrorKind.UNAVAILABLE, "control_db", "not_open",
                                "the control database is not open")
        return await self.store.run(fn)

    async def batch(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run every statement in one transaction; if any fails, none of them took effect."""
        async def all_of(tx: Tx) -> None:
            for sql, params in statements:
                await tx.write(sql, params)

        await self.run(all_of)

    async def transaction(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction of the SQLite file: Post's
        executor on the control database (SQLite only) reads and writes in one."""
        if self._file is None:
            raise PlatformError(PlatformErrorKind.INTERNAL, "control_db", "no_sqlite_file",
                                "Post on the control database needs its SQLite file")
        async with self._file.transaction() as conn:
            return await fn(conn)

    async def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if not self._opened:
            raise PlatformError(PlatformErrorKind.UNAVAILABLE, "control_db", "not_open",
                                "the control database is not open")
        return [tuple(r) for r in await self.store.fetch(sql, params)]

    async def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = await self.fetch_all(sql, params)
        return rows[0] if rows else None


def mapped_error(e: sqlite3.Error) -> MailboxActorsError:
    """SQLite's messages name tables and constraints, never bound values, so they are safe to carry."""
    if isinstance(e, sqlite3.IntegrityError):
        return MailboxActorsError(ErrorCode.CONFLICT, "a control database constraint refused the write",
                                  details={"sqlite": str(e)})
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        return PlatformError(PlatformErrorKind.UNAVAILABLE, "control_db", "locked",
                             "the control database stayed locked past the busy timeout",
                             details={"sqlite": str(e)})
    if isinstance(e, sqlite3.OperationalError) and _is_disk_full(e):
        # OPS-3: the disk, not the request: retryable, and reads still work.
        return PlatformError(PlatformErrorKind.UNAVAILABLE, "control_db", "disk_full",
                             "the control database cannot be written now (the disk is full or "
                             "failing)", details={"sqlite": str(e)})
    return PlatformError(PlatformErrorKind.INTERNAL, "control_db", type(e).__name__,
                         "control database error", details={"sqlite": str(e)})
