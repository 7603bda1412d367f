"""The queue database file (Q-1): one aiosqlite connection per process, its schema, and how a
statement or a transaction runs on it.

Each statement or transaction holds the connection's lock (a transaction must not interleave with
another task's statements), runs shielded from cancellation, and waits for other processes' locks in
small steps (``sqlite_shared``); past the busy timeout it is retryable ``unavailable``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import aiosqlite
import anyio

from mailbox_actors.platform.queues.schema import MIGRATIONS
from mailbox_actors.platform.shared_sqlite import execute_when_unlocked, retry_while_locked
from mailbox_actors.platform.sqlite_files import DamagedFile, check_whole, create_whole
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["QueueFile"]


class QueueFile:
    """``async with QueueFile(path) as f:`` then ``await f.fetch(sql)`` or
    ``async with f.transaction() as conn:``."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 10_000) -> None:
        self.path = Path(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: aiosqlite.Connection | None = None
        self._lock = anyio.Lock()

    # ---- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is not None:
            return
        # No SQLite busy timeout: sqlite_shared waits for other processes' locks in finer steps.
        try:
            # A damaged file stops here, never recreated (OPS-2); a new one appears whole.
            check_whole(self.path, "queue database")
            create_whole(self.path)
            conn = await aiosqlite.connect(self.path, isolation_level=None, timeout=0)
        except (sqlite3.Error, OSError) as e:
            raise MailboxActorsError(ErrorCode.INTERNAL_ERROR,
                                     f"the queue database at {self.path} cannot be opened",
                                     details={"sqlite": str(e)}) from e
        try:
            await conn.execute_fetchall("PRAGMA busy_timeout = 0")
            await execute_when_unlocked(conn, "PRAGMA journal_mode = WAL", self._busy_timeout_ms)
            # WAL with synchronous=NORMAL survives a process crash (the node's failure model),
            # without an fsync per message.
            await conn.execute_fetchall("PRAGMA synchronous = NORMAL")
            self._conn = conn
            await self._migrate()
        except BaseException as e:
            self._conn = None
            with anyio.CancelScope(shield=True):
                await conn.close()
            if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError):
                raise DamagedFile(self.path, "queue database", type(e).__name__) from e
            raise

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            async with self._lock:
                with anyio.CancelScope(shield=True):
                    await conn.close()

    async def __aenter__(self) -> QueueFile:
        await self.open()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def _migrate(self) -> None:
        async with self.transaction() as conn:
            rows = await conn.execute_fetchall("PRAGMA user_version")
            version = int(next(iter(rows))[0])
            if version > len(MIGRATIONS):
                raise MailboxActorsError(
                    ErrorCode.INTERNAL_ERROR,
                    f"queue database {self.path} has schema version {version}, newer than this "
                    f"code's {len(MIGRATIONS)}; upgrade mailbox-actors")
            for statements in MIGRATIONS[version:]:
                for sql in statements:
                    await conn.execute_fetchall(sql)
            if version < len(MIGRATIONS):
                await conn.execute_fetchall(f"PRAGMA user_version = {len(MIGRATIONS)}")

    # ---- SQL plumbing --------------------------------------------------------------------------

    def _require(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise RuntimeError("QueueService is not open: call open() or use 'async with'")
        return self._conn

    async def fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
                     ) -> list[Any]:
        """One statement in its own (implicit) transaction; its rows."""
        conn = self._require()
        async with self._lock:
            with anyio.CancelScope(shield=True), _busy_is_unavailable(self.path):
                rows = list(await retry_while_locked(
                    lambda: conn.execute_fetchall(sql, params), self._busy_timeout_ms))
        return rows

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """BEGIN IMMEDIATE: take the write lock first, so the wait for it is covered and the
        snapshot is never stale."""
        conn = self._require()
        async with self._lock:
            with anyio.CancelScope(shield=True), _busy_is_unavailable(self.path):
                await retry_while_locked(lambda: conn.execute("BEGIN IMMEDIATE"),
                                         self._busy_timeout_ms)
                try:
                    yield conn
                except BaseException:
                    await conn.rollback()
                    raise
                await conn.commit()


@contextmanager
def _busy_is_unavailable(path: Path) -> Iterator[None]:
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc)
        if "locked" in text or "busy" in text:
            raise MailboxActorsError(
                ErrorCode.UNAVAILABLE,
                f"queue database {path} stayed locked past the busy timeout") from exc
        raise
