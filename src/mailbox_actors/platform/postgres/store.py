"""A part of the shared state (the control data, the queues) in PostgreSQL, as a ``SharedStore``
(CL-7): the component's schema applied when opened, the shared code's ``?`` statements run with
psycopg's ``%s``, and PostgreSQL's errors mapped to SPEC section 5's codes (a constraint is
``conflict``; the message and SQLSTATE are kept, never a bound value)."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg

from mailbox_actors.platform.postgres.database import PgDatabase
from mailbox_actors.platform.postgres.listener import PgListener
from mailbox_actors.platform.postgres.migrations import Schema
from mailbox_actors.platform.shared_store import POSTGRES, Dialect, Tx
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError, PlatformError, PlatformErrorKind

__all__ = ["PgStore", "PgTx", "to_pg"]

T = TypeVar("T")


_ARRAY_PARAM = re.compile(r"\?(?=::[a-z ]+\[\])")


@functools.lru_cache(maxsize=1024)
def to_pg(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled); an array parameter
    (``?::text[]``, the ``Dialect``'s ``unnest`` and ``ANY``) as ``%b``, sent in binary: psycopg
    dumps a list as text by quoting and escaping each element with a regular expression, which
    was a tenth of a node's CPU on the event path. The shared statements hold no ``?`` inside a
    string literal."""
    return _ARRAY_PARAM.sub("%b", sql.replace("%", "%%")).replace("?", "%s")


class PgTx:
    """A transaction's connection as the shared code uses it. In a pipeline (``run``) a
    ``write`` is queued and sent with whatever follows; ``execute_fetchall`` waits for its
    result (and for everything queued before it)."""

    __slots__ = ("conn", "pipeline")

    def __init__(self, conn: psycopg.AsyncConnection[Any],
                 pipeline: psycopg.AsyncPipeline | None = None) -> None:
        self.conn = conn
        self.pipeline = pipeline

    async def execute_fetchall(self, sql: str, parameters: Sequence[Any] = (), /
                               ) -> list[tuple[Any, ...]]:
        cur = await self.conn.execute(to_pg(sql), parameters)
        if self.pipeline is not None:
            await self.pipeline.sync()
        return await cur.fetchall() if cur.description is not None else []

    async def write(self, sql: str, parameters: Sequence[Any] = (), /) -> None:
        await self.conn.execute(to_pg(sql), parameters)


class PgStore:
    """``schema``'s component in ``db``; opening the store opens ``db`` (shared, counted)."""

    def __init__(self, db: PgDatabase, schema: Schema, *, what: str) -> None:
        self.db = db
        self.schema = schema
        self.what = what
        db.add_schema(schema)

    @property
    def dialect(self) -> Dialect:
        return POSTGRES

    @property
    def where(self) -> str:
        return f"PostgreSQL at {self.db.where}"

    async def open(self) -> None:
        await self.db.open()

    async def close(self) -> None:
        await self.db.close()

    def notifications(self) -> PgListener:
        return self.db.listener

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async def one(conn: psycopg.AsyncConnection[Any]) -> list[Any]:
            return await PgTx(conn).execute_fetchall(sql, params)

        try:
            return await self.db.with_connection(one)
        except psycopg.Error as e:
            raise self.mapped(e) from e

    async def run(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """``fn`` in one pipelined transaction (see ``PgTx``), run again on a dead connection."""
        async def tx(conn: psycopg.AsyncConnection[Any]) -> T:
            async with conn.pipeline() as pipeline, conn.transaction():
                return await fn(PgTx(conn, pipeline))

        try:
            return await self.db.with_connection(tx)
        except psycopg.Error as e:
            raise self.mapped(e) from e

    def mapped(self, e: psycopg.Error) -> MailboxActorsError:
        primary = e.diag.message_primary or type(e).__name__
        details = {"postgres": f"{e.sqlstate or '-'} {primary}"}
        if isinstance(e, psycopg.IntegrityError):
            return MailboxActorsError(ErrorCode.CONFLICT, f"a {self.what} constraint refused "
                                      "the write", details=details)
        return PlatformError(PlatformErrorKind.INTERNAL, "postgres", type(e).__name__,
                             f"{self.what} error", details=details)
