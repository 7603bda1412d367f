"""The shared SQLite file as a ``SharedStore`` (Q-3): statements and transactions go to the
file's one connection (``shared_file``); a transaction's ``tx`` is aiosqlite's connection itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import aiosqlite

from mailbox_actors.platform.shared_store import SQLITE, Dialect, Tx
from mailbox_actors.platform.sqlite.shared_file import SharedSqliteFile

__all__ = ["SqliteStore", "SqliteTx"]

T = TypeVar("T")


class SqliteStore:
    """A ``SharedStore`` on one shared SQLite file."""

    def __init__(self, file: SharedSqliteFile) -> None:
        self.file = file

    @property
    def dialect(self) -> Dialect:
        return SQLITE

    @property
    def where(self) -> str:
        return str(self.file.path)

    async def open(self) -> None:
        await self.file.open()

    async def close(self) -> None:
        await self.file.close()

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await self.file.fetch(sql, params)

    def notifications(self) -> None:
        return None

    async def run(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        async with self.file.transaction() as conn:
            return await fn(SqliteTx(conn))


class SqliteTx:
    """aiosqlite's connection as a ``Tx``."""

    __slots__ = ("conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def execute_fetchall(self, sql: str, parameters: Sequence[Any] = (), /
                               ) -> Iterable[Any]:
        return await self.conn.execute_fetchall(sql, parameters)

    async def write(self, sql: str, parameters: Sequence[Any] = (), /) -> None:
        await self.conn.execute(sql, parameters)
