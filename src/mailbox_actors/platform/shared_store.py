"""The store the control database and the queues run their SQL on (Q-3, CL-7): the cluster's
shared SQLite file (``sqlite.store``) on one machine, or PostgreSQL (``postgres.store``) on many.

Both take the same SQL text, written with ``?`` placeholders; the few statements that differ
between the engines (an insert that ignores a duplicate, a claim that skips locked rows) are the
``Dialect``'s. ``fetch`` runs one statement as its own transaction; ``run(fn)`` runs ``fn(tx)`` as
one transaction, which a PostgreSQL store runs again from the start when its connection died
(``pg_terminate_backend``, a restart): ``fn`` must therefore be safe to run twice, and is never
half-applied.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

__all__ = ["POSTGRES", "SQLITE", "Dialect", "Notifications", "SharedStore", "Tx"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the engines in the statements shared code writes."""

    name: str
    insert_ignore: str  # "INSERT OR IGNORE" / "INSERT"
    on_conflict_ignore: str  # "" / " ON CONFLICT DO NOTHING"
    skip_locked: str  # "" / " FOR UPDATE SKIP LOCKED" (a claim's inner SELECT)
    # Run first in a transaction that appends to the event index, so the index's order (its
    # seq) is its commit order, as with SQLite's one writer: "" / an advisory lock.
    index_lock: str

    def insert_rows(self, table: str, columns: Sequence[str], types: Sequence[str],
                    rows: Sequence[Sequence[Any]], *, returning: str | None = None,
                    source_filter: str = "") -> tuple[str, list[Any]]:
        """An INSERT of ``rows`` ignoring those whose key is there already, and its parameters.
        SQLite: one VALUES tuple per row. PostgreSQL: one array per column through ``unnest``
        (``types`` are the columns' SQL types), so the statement's text does not depend on how
        many rows there are and is planned once per connection, not once per batch size.
        ``source_filter`` (PostgreSQL only) is a WHERE clause on the rows' source."""
        cols = ", ".join(columns)
        if self.name != "postgres":
            values = ",".join(["(" + ", ".join("?" * len(columns)) + ")"] * len(rows))
            return (self.ignore_duplicates(f"{table} ({cols})", f"VALUES {values}" + (
                f" RETURNING {returning}" if returning else "")),
                [v for r in rows for v in r])
        arrays = ", ".join(f"?::{t}[]" for t in types)
        sql = (f"INSERT INTO {table} ({cols}) SELECT * FROM unnest({arrays}) AS v"
               + (f" WHERE {source_filter}" if source_filter else "") + " ON CONFLICT DO NOTHING"
               + (f" RETURNING {returning}" if returning else ""))
        return sql, [list(col) for col in zip(*rows, strict=True)]

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column IN (?, ?, ...)`` (SQLite), or ``column = ANY(?)`` with one text array
        (PostgreSQL: one statement text however many values, prepared once)."""
        if self.name != "postgres":
            return f"{column} IN ({','.join('?' * len(values))})", list(values)
        return f"{column} = ANY(?::text[])", [list(values)]

    def ignore_duplicates(self, insert_into: str, rest: str) -> str:
        """``INSERT [OR IGNORE] INTO <insert_into> <rest> [ON CONFLICT DO NOTHING]``; ``rest``
        is the VALUES list, and a RETURNING clause goes after the conflict clause."""
        head, sep, returning = rest.partition(" RETURNING ")
        return (f"{self.insert_ignore} INTO {insert_into} {head}{self.on_conflict_ignore}"
                + (f" RETURNING {returning}" if sep else ""))


SQLITE = Dialect("sqlite", "INSERT OR IGNORE", "", "", "")
POSTGRES = Dialect("postgres", "INSERT", " ON CONFLICT DO NOTHING", " FOR UPDATE SKIP LOCKED",
                   "SELECT pg_advisory_xact_lock(7305050003)")


class Tx(Protocol):
    """A transaction's statements. ``write`` is for a statement whose result is not needed: on
    PostgreSQL it is sent without waiting (the transaction is pipelined), so BEGIN, the writes
    and COMMIT of a transaction that reads nothing travel together, one round trip in all."""

    async def execute_fetchall(self, sql: str, parameters: Sequence[Any] = (), /
                               ) -> Iterable[Any]: ...

    async def write(self, sql: str, parameters: Sequence[Any] = (), /) -> None: ...


class Notifications(Protocol):
    """PostgreSQL's LISTEN/NOTIFY as a store offers it (``postgres.listener.PgListener``)."""

    @property
    def generation(self) -> int | None:
        """Counts the listening connections made; None while none listens."""
        ...

    def subscribe(self, channel: str, fn: Callable[[str | None], None]) -> None:
        """``fn(payload)`` per notification; ``fn(None)`` when some may have been missed."""
        ...


class SharedStore(Protocol):
    """Where one part of the shared state (the control data, the queues) is kept."""

    @property
    def dialect(self) -> Dialect: ...

    @property
    def where(self) -> str:
        """Where it is, for messages (a path, or PostgreSQL's host and database: no password)."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    async def run(self, fn: Callable[[Tx], Awaitable[T]]) -> T: ...

    def notifications(self) -> Notifications | None:
        """How this store tells of changes (PostgreSQL), or None (SQLite: readers poll)."""
        ...
