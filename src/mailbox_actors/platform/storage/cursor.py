"""The cursor ``exec`` returns (RT-6, RT-13): rows, and how many were read and written."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mailbox_actors.platform.storage.counting import RowCounter

__all__ = ["BufferedRows", "SqlCursor"]


class BufferedRows:
    """A finished statement's rows, read out so the savepoint around its script can be released
    (SQLite refuses to release one while a statement, such as a RETURNING, is still active)."""

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self.description = cur.description
        self._rows: list[Any] = cur.fetchall() if cur.description is not None else []
        self.rowcount = cur.rowcount
        self._at = 0

    def __iter__(self) -> Iterator[Any]:
        while self._at < len(self._rows):
            self._at += 1
            yield self._rows[self._at - 1]

    def fetchmany(self, n: int) -> list[Any]:
        out = self._rows[self._at:self._at + n]
        self._at += len(out)
        return out

    def fetchall(self) -> list[Any]:
        return self.fetchmany(len(self._rows))


class SqlCursor:
    """The result of ``exec``: iterate it, or take ``one()`` / ``all()``.

    ``rows_written`` counts table and index rows; ``rows_read`` the rows scanned (or returned, if
    more), as workerd counts them for billing (RT-13, ``counting``). It may grow as you iterate.
    """

    __slots__ = ("_counter", "_cur", "_done", "_query", "_read", "_returned", "rows_written")

    def __init__(self, cur: sqlite3.Cursor | BufferedRows, rows_written: int,
                 counter: RowCounter | None = None, query: str = "",
                 read: int | None = None) -> None:
        self._cur = cur
        self._returned = 0
        self._done = cur.description is None  # no result rows: it ran to the end in execute
        # Rows scanned are asked of SQLite only when rows_read is read (most callers never do):
        # the counter and the text, not a closure made for every statement; ``read`` when the
        # count was taken already (a script's last statement, read out before its savepoint).
        self._counter = counter
        self._query = query
        self._read = read
        self.rows_written = rows_written

    @property
    def rows_read(self) -> int:
        scanned = self._read
        if scanned is None:
            counter = self._counter
            scanned = counter.scanned(self._query, self._done) if counter is not None else 0
        return max(self._returned, scanned)

    def __iter__(self) -> Iterator[sqlite3.Row]:
        for row in self._cur:
            self._returned += 1
            yield row
        self._done = True

    def one(self) -> sqlite3.Row:
        """Exactly one row, or ``ValueError``."""
        rows = self._cur.fetchmany(2)
        self._returned += len(rows)
        if len(rows) < 2:
            self._done = True
        if len(rows) != 1:
            raise ValueError(f"expected exactly one row, got {'none' if not rows else 'more'}")
        return rows[0]  # type: ignore[no-any-return]

    def all(self) -> list[sqlite3.Row]:
        rows = self._cur.fetchall()
        self._returned += len(rows)
        self._done = True
        return rows

    @property
    def column_names(self) -> list[str]:
        return [d[0] for d in self._cur.description or ()]
