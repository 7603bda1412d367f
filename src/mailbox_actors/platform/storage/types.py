"""The types around an actor's SQL storage (RT-6, RT-7, AL-1): its limits, durability modes, the
errors it raises, the sink told about alarm changes, and the cursor ``exec`` returns."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import msgspec

from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["AlarmSink", "BufferedRows", "Durability", "Limits", "NoAlarmSink", "SqlCursor",
           "StatementRefused", "StorageCorrupt", "StorageWriteFailed", "TransactionRolledBack"]

_GIB = 1 << 30


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """RT-7 storage limits; the defaults are Durable Objects' own."""

    max_bound_parameters: int = 100
    max_statement_bytes: int = 100_000
    max_value_bytes: int = 2_000_000
    max_columns: int = 100
    max_database_bytes: int = 10 * _GIB


class Durability:
    NORMAL = "normal"  # survives a process crash (WAL, synchronous=NORMAL)
    FULL = "full"  # survives power loss (synchronous=FULL)
    ALL = (NORMAL, FULL)


class StatementRefused(MailboxActorsError):
    """User SQL tried something only the runtime may do (RT-5)."""

    def __init__(self, reason: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, f"SQL statement refused: {reason}",
                         details={"refused": reason})


class StorageCorrupt(MailboxActorsError):
    """The actor's file is not a usable database (REL-4): that actor fails alone."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.INTERNAL_ERROR, "the actor's storage file is unreadable",
                         details={"storage": detail})


class StorageWriteFailed(MailboxActorsError):
    """The disk is full (or failing) (OPS-3): this write was not stored; reads still work. Unlike
    ``limit_exceeded`` (the actor's own size limit) it is retryable: space can come back."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, "the actor's storage cannot be written now (the "
                         "disk is full or failing); nothing of this write was stored",
                         details={"storage": detail})


class TransactionRolledBack(MailboxActorsError):
    """SQLite ended a whole transaction itself (disk full, ``OR ROLLBACK``, ``RAISE(ROLLBACK)``):
    nothing of it was stored, whatever the code went on to do."""

    def __init__(self, cause: BaseException | None) -> None:
        code = cause.code if isinstance(cause, MailboxActorsError) else ErrorCode.INTERNAL_ERROR
        why = cause.message if isinstance(cause, MailboxActorsError) else type(cause).__name__
        super().__init__(code, f"SQLite rolled the whole transaction back ({why}); none of its "
                               "writes were stored", details={"rolled_back": True})


class AlarmSink(Protocol):
    """Where an actor's alarm changes go besides its own file (the node's alarm scheduler)."""

    def before_commit(self, at_ms: int) -> None:
        """Called inside the transaction that sets the alarm, before it commits."""

    def committed(self, at_ms: int | None) -> None:
        """Called after a commit that changed the alarm, with the committed value."""


class NoAlarmSink:
    """Where alarm changes go when nobody schedules them (a storage opened alone)."""

    def before_commit(self, at_ms: int) -> None:
        pass

    def committed(self, at_ms: int | None) -> None:
        pass


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

    __slots__ = ("_cur", "_done", "_returned", "_scanned", "rows_written")

    def __init__(self, cur: sqlite3.Cursor | BufferedRows, rows_written: int,
                 scanned: Callable[[bool], int] | None = None) -> None:
        self._cur = cur
        self._returned = 0
        self._done = cur.description is None  # no result rows: it ran to the end in execute
        self._scanned = scanned
        self.rows_written = rows_written

    @property
    def rows_read(self) -> int:
        scanned = self._scanned(self._done) if self._scanned is not None else 0
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
