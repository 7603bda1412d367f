"""The PostgreSQL foundation of the shared state (CL-7), against a real server this module starts
and stops by pid: ordered migrations under an advisory lock, a newer schema refused, a DSN that
does not connect named without its password, a transaction whose connection is killed run again
and never half-applied."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

from _pg import PgServer, new_database, serving, terminate_backends
from mailbox_actors.platform.postgres.database import PgDatabase, PgUnreachable
from mailbox_actors.platform.postgres.migrations import Schema, SchemaTooNew, schema_version
from mailbox_actors.testing.ports import free_port
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


ONE = Schema("things", (("CREATE TABLE things (id integer PRIMARY KEY, note text)",),))
TWO = Schema("things", (*ONE.migrations, ("ALTER TABLE things ADD COLUMN extra integer",)))


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with serving() as server:
        yield server


async def test_migrations_apply_in_order_once_and_a_newer_schema_is_refused(pg: PgServer) -> None:
    """CL-7: version 1 then 2 applied in order and recorded; many processes' opens at once migrate
    once (the advisory lock); a database newer than the code is refused, never downgraded."""
    dsn = new_database(pg)
    async with PgDatabase(dsn, schemas=[ONE]) as db:
        assert await db.with_connection(lambda c: schema_version(c, "things")) == 1
    dbs = [PgDatabase(dsn, schemas=[TWO]) for _ in range(4)]
    async with anyio.create_task_group() as tg:
        for d in dbs:
            tg.start_soon(d.open)
    try:
        async def columns(c: Any) -> list[str]:
            cur = await c.execute("SELECT column_name FROM information_schema.columns WHERE "
                                  "table_name = 'things' ORDER BY ordinal_position")
            return [r[0] for r in await cur.fetchall()]
        assert await dbs[0].with_connection(columns) == ["id", "note", "extra"]
        assert await dbs[0].with_connection(lambda c: schema_version(c, "things")) == 2
    finally:
        for d in dbs:
            await d.close()
    with pytest.raises(SchemaTooNew, match="things schema is version 2; this code knows up to 1"):
        await PgDatabase(dsn, schemas=[ONE]).open()


async def test_a_dsn_that_does_not_connect_is_named_without_its_password(pg: PgServer) -> None:
    """CL-7: refused connection, unknown database: ``PgUnreachable`` names the setting and where,
    never the password."""
    closed = f"host=127.0.0.1 port={free_port()} user=postgres password=s3cret-pw dbname=x"
    missing = pg.dsn("no_such_db") + " password=s3cret-pw"
    for dsn in (closed, missing, f"postgresql://postgres:s3cret-pw@127.0.0.1:{pg.port}/nodb"):
        with pytest.raises(PgUnreachable) as caught:
            await PgDatabase(dsn, setting="postgres", connect_timeout_s=2).open()
        text = f"{caught.value.message} {caught.value.details} {caught.value.fix}"
        assert "setting 'postgres'" in text and "127.0.0.1" in text
        assert "s3cret-pw" not in text


async def test_a_killed_connection_is_retried_and_never_half_applied(pg: PgServer) -> None:
    """CL-7: a transaction whose backend is terminated between its two inserts leaves neither;
    it runs again on a new connection and both are there exactly once."""
    dsn = new_database(pg)
    async with PgDatabase(dsn, schemas=[ONE], retry_for_s=10) as db:
        tries = 0

        async def two_rows(conn: psycopg.AsyncConnection[Any]) -> int:
            nonlocal tries
            tries += 1
            await conn.execute("INSERT INTO things (id, note) VALUES (1, 'a')")
            if tries == 1:
                assert await anyio.to_thread.run_sync(terminate_backends, pg, dsn) >= 1
            await conn.execute("INSERT INTO things (id, note) VALUES (2, 'b')")
            return tries

        assert await db.run(two_rows) == 2

        async def rows(c: Any) -> list[tuple[Any, ...]]:
            return list(await (await c.execute("SELECT id, note FROM things ORDER BY id")).fetchall())
        assert await db.with_connection(rows) == [(1, "a"), (2, "b")]


async def test_an_outage_past_the_retry_window_is_unavailable(pg: PgServer) -> None:
    """CL-7: with the server stopped, a transaction is tried until ``retry_for_s`` and then answers
    ``unavailable`` (retryable); once the server is back the same database serves again."""
    dsn = new_database(pg)
    async with PgDatabase(dsn, schemas=[ONE], retry_for_s=1) as db:
        await anyio.to_thread.run_sync(pg.stop)
        try:
            with pytest.raises(MailboxActorsError) as caught:
                await db.run(lambda c: c.execute("INSERT INTO things (id) VALUES (7)"))
            assert caught.value.code is ErrorCode.UNAVAILABLE
        finally:
            await anyio.to_thread.run_sync(pg.start)
        db.retry_for_s = 30
        await db.run(lambda c: c.execute("INSERT INTO things (id) VALUES (8)"))
        got = await db.with_connection(
            lambda c: c.execute("SELECT array_agg(id ORDER BY id) FROM things"))
        assert (await got.fetchone()) == ([8],)
