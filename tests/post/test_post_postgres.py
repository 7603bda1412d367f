"""Post on PostgreSQL (PO-9) against a real server this test module starts and stops itself
(``tests/support/_pg.py``); the receivers are the Post test actors on an in-process node."""

from __future__ import annotations

import functools
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import _post_actors as pa
from _pg import PgServer, serving
from mailbox_actors.post.executor import Claimed
from mailbox_actors.post.loop import run_forever
from mailbox_actors.post.pg_schema import MIGRATIONS, apply_schema
from mailbox_actors.post.postgres import PostgresPost
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.post import PostDeliver, PostEnvelope

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

_DB = itertools.count()


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with serving() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    pa.reset()
    yield
    pa.reset()


class Env:
    def __init__(self, pg: PgServer, dsn: str, pool: AsyncConnectionPool[Any], rt: TestRuntime
                 ) -> None:
        self.pg, self.dsn, self.pool, self.rt = pg, dsn, pool, rt
        self.post = PostgresPost(pool, pa.ROUTES, self.deliver, clock=rt.clock, rng=rt.rng)

    async def deliver(self, job: Claimed, env: PostEnvelope, deadline_ms: int) -> Any:
        oid = self.rt.id_from_name(job.namespace, job.object_name)
        return await self.rt.call(job.namespace, oid, PostDeliver(envelope=env, attempt=job.attempts),
                                  tenant_id=pa.TENANT, deadline_ms=deadline_ms)

    async def send(self, key: str, to: str = "a", text: str = "", fact: str | None = None) -> str:
        async with self.pool.connection() as conn, conn.transaction():
            if fact is not None:
                await conn.execute("INSERT INTO facts (k) VALUES (%s)", (fact,))
            return await self.post.send(conn, pa.NOTE, pa.Inbox(to), pa.Note(text), key)

    async def drain(self, limit_ms: int = 3_600_000) -> None:
        """Run the executor and move the fake clock to each wake until nothing is pending."""
        start = self.rt.now_ms()
        while True:
            await self.post.run()
            wake = await self.post.next_wake()
            if wake is None or wake - start > limit_ms:
                return
            if wake > self.rt.now_ms():
                await self.rt.advance(wake - self.rt.now_ms())

    async def log(self, name: str = "a") -> list[list[str]]:
        oid = self.rt.id_from_name("post_receiver", name)
        return await self.rt.call("post_receiver", oid, pa.Log(), tenant_id=pa.TENANT)  # type: ignore[no-any-return]

    async def facts(self) -> list[str]:
        async with self.pool.connection() as conn:
            return [r[0] for r in await (await conn.execute(
                "SELECT k FROM facts ORDER BY k")).fetchall()]


@pytest.fixture
async def env(pg: PgServer) -> AsyncIterator[Env]:
    name = f"post_{next(_DB)}"
    with psycopg.connect(pg.conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        pg.dsn(name), min_size=1, max_size=4, open=False, timeout=10,
        check=AsyncConnectionPool.check_connection)
    await pool.open()
    try:
        async with pool.connection() as conn:
            assert await apply_schema(conn) == len(MIGRATIONS)
            await conn.execute("CREATE TABLE facts (k text PRIMARY KEY)")
            await conn.commit()
        async with TestRuntime(objects=pa.POST_OBJECTS) as rt:
            for r in ("a", "b"):
                await rt.call("post_receiver", rt.id_from_name("post_receiver", r), pa.RInit(),
                              tenant_id=pa.TENANT)
            yield Env(pg, pg.dsn(name), pool, rt)
    finally:
        await pool.close()
        with psycopg.connect(pg.conninfo, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


async def test_schema_is_applied_once_and_a_newer_one_refused(env: Env) -> None:
    """PO-9: the schema comes from ordered migrations: applying again changes nothing; a
    database migrated by newer code is refused."""
    async with env.pool.connection() as conn:
        assert await apply_schema(conn) == len(MIGRATIONS) == 2
        await conn.execute("INSERT INTO post_schema (version) VALUES (99)")
        await conn.commit()
        with pytest.raises(MailboxActorsError, match="version 99"):
            await apply_schema(conn)


async def test_send_commits_or_rolls_back_with_the_producers_transaction(env: Env) -> None:
    """PO-9, PO-2: send writes on the producer's open transaction: a rolled-back transaction
    leaves no envelope, a committed one is delivered; a bad event is invalid_request and the
    producer's transaction rolls back; a conflicting replay rolls back the whole transaction."""
    with pytest.raises(RuntimeError, match="boom"):
        async with env.pool.connection() as conn, conn.transaction():
            await conn.execute("INSERT INTO facts (k) VALUES ('gone')")
            await env.post.send(conn, pa.NOTE, pa.Inbox("a"), pa.Note("x"), "k0")
            raise RuntimeError("boom")
    assert await env.post.get("k0") is None
    assert await env.send("k1", text="one", fact="f1") == "queued"
    with pytest.raises(MailboxActorsError) as bad:
        async with env.pool.connection() as conn, conn.transaction():
            await conn.execute("INSERT INTO facts (k) VALUES ('f2')")
            await env.post.send(conn, pa.NOTE, pa.Inbox("a"), pa.Intent("x"), "k2")
    assert bad.value.code.value == "invalid_request"
    with pytest.raises(MailboxActorsError) as conflict:
        await env.send("k1", text="other", fact="f3")
    assert conflict.value.code.value == "conflict"
    assert await env.facts() == ["f1"]
    await env.drain()
    assert await env.log() == [["k1", "one"]]
    assert await env.send("k1", text="one") == "delivered"  # a replay keeps the receipt
    rec = await env.post.get("k1")
    assert rec is not None and rec.receipt == {"n": 1, "seq": rec.seq}


async def test_order_under_retries_and_a_lost_answer_answered_duplicate(env: Env) -> None:
    """PO-9, PO-3, PO-4: the first of five events fails twice and holds the other four; the
    third's answer is lost and its retry is answered duplicate; all five arrive once, in order;
    another address is not held."""
    pa.SCRIPT["e0"] = ["fail", "fail"]
    pa.SCRIPT["e2"] = ["lose"]
    for i in range(5):
        await env.send(f"e{i}", text=f"t{i}")
    await env.send("other", to="b", text="free")
    await env.post.run()
    assert await env.log() == [] and await env.log("b") == [["other", "free"]]
    await env.drain()
    assert await env.log() == [[f"e{i}", f"t{i}"] for i in range(5)]
    e2 = await env.post.get("e2")
    assert e2 is not None and (e2.state, e2.attempts) == ("delivered", 2)
    assert pa.ATTEMPTS["e2"] == 2


async def test_dead_letter_goes_back_behind_current_work_on_retry(env: Env) -> None:
    """PO-9, PO-5, PO-6: a refusal is a dead letter with its reason and attempt count; retry(key)
    in the caller's transaction puts it behind the work queued now; dead_letters pages."""
    pa.SCRIPT["d"] = ["refuse"]
    await env.send("d", text="dead")
    await env.drain()
    page = await env.post.dead_letters()
    assert [(d.key, d.reason, d.attempts) for d in page.letters] == [("d", "no_such_inbox", 1)]
    pa.SCRIPT["q1"] = ["fail"]
    await env.send("q1", text="one")
    await env.send("q2", text="two")
    await env.post.run()
    async with env.pool.connection() as conn, conn.transaction():
        assert (await env.post.retry(conn, "d")).value == "requeue"
    await env.drain()
    assert await env.log() == [["q1", "one"], ["q2", "two"], ["d", "dead"]]
    async with env.pool.connection() as conn, conn.transaction():
        assert (await env.post.retry(conn, "d")).value == "delivered"


async def test_purge_locks_the_envelopes_and_removes_every_job(env: Env) -> None:
    """PO-9: purge statements remove the selected envelopes and all their jobs (settled ones
    too) in the caller's transaction, locking the envelopes first: an overlapping retry waits
    for the lock (here: gives up on it) and then finds nothing, never an orphaned job."""
    pa.SCRIPT["p-1"] = ["refuse"]
    for key in ("p-1", "p-2", "keep"):
        await env.send(key, text=key)
    await env.drain()
    stmts = PostgresPost.purge_statements("SELECT key FROM post_envelopes WHERE key LIKE %s",
                                          ("p-%",))
    async with env.pool.connection() as purger:
        async with purger.transaction():
            for sql, params in stmts:
                await purger.execute(sql, params)
            async with await psycopg.AsyncConnection.connect(env.dsn) as other:
                await other.execute("SET lock_timeout = '200ms'")
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    async with other.transaction():
                        await env.post.retry(other, "p-1")
    async with env.pool.connection() as conn:
        rows = await (await conn.execute("SELECT key FROM post_jobs ORDER BY key")).fetchall()
        assert [r[0] for r in rows] == ["keep"]
        async with conn.transaction():
            with pytest.raises(MailboxActorsError) as gone:
                await env.post.retry(conn, "p-1")
    assert gone.value.code.value == "tenant_not_found"  # PostgresPost's default not_found


async def test_a_connection_killed_mid_transaction_sends_nothing(env: Env) -> None:
    """PO-9: a producer whose connection is terminated (pg_terminate_backend) before its
    commit sent nothing, and its fact is gone with it; the same key sent again is delivered
    once."""
    async with await psycopg.AsyncConnection.connect(env.dsn) as producer:
        pid = producer.info.backend_pid
        with pytest.raises(psycopg.OperationalError):
            async with producer.transaction():
                await producer.execute("INSERT INTO facts (k) VALUES ('lost')")
                await env.post.send(producer, pa.NOTE, pa.Inbox("a"), pa.Note("x"), "k")
                async with env.pool.connection() as killer:
                    await killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert await env.post.get("k") is None and await env.facts() == []
    await env.send("k", text="x", fact="kept")
    await env.drain()
    assert await env.log() == [["k", "x"]]


async def test_the_database_restarted_under_load_loses_and_repeats_nothing(env: Env) -> None:
    """PO-9: a producer keeps sending while the host's wake (run_forever) runs the executor and
    the server is restarted (fast shutdown, sessions cut); every send that committed is delivered
    exactly once and in send order; sends cut off are sent again with the same key, never twice."""
    n = 60
    committed: list[str] = []

    async def producer() -> None:
        for i in range(n):
            key = f"m{i:03d}"
            if i == 20:
                await anyio.to_thread.run_sync(env.pg.restart)
            while True:
                try:
                    await env.send(key, text=key)
                    committed.append(key)
                    break
                except (psycopg.OperationalError, psycopg.errors.AdminShutdown):
                    await anyio.sleep(0.05)  # pace retries against a restarting server
                except Exception as e:  # the pool may time out while the server is down
                    if "couldn't get a connection" not in str(e):
                        raise

    async with anyio.create_task_group() as tg:
        # The host's wake outlasts the outage: its failed rounds are logged and tried again.
        tg.start_soon(functools.partial(run_forever, env.post, env.rt.clock, idle_ms=10,
                                        error_pause_ms=50))
        await producer()
        tg.cancel_scope.cancel()
    await env.drain()
    assert committed == [f"m{i:03d}" for i in range(n)]
    assert await env.log() == [[k, k] for k in committed]


async def test_prepare_is_persisted_once_and_a_late_preparation_cannot_send(env: Env) -> None:
    """PO-9, PO-6: on PostgreSQL too, a preparation that finishes after its attempt expired sends
    nothing; the next one is stored before sending, and the retry after a lost answer reuses it
    (the receiver answers duplicate)."""
    pa.PREPARE_CLOCK.append(env.rt.clock)
    pa.SCRIPT["p"] = ["lose"]
    async with env.pool.connection() as conn, conn.transaction():
        await env.post.send(conn, pa.PREPARED_NOTE, pa.Inbox("a"), pa.Intent("invite"), "p")
    await env.post.run()
    late = await env.post.get("p")
    assert late is not None and (late.reason, late.prepared) == ("preparation_expired", None)
    assert pa.ATTEMPTS.get("p") is None
    await env.drain()
    assert pa.PREPARED == ["invite", "invite"]
    done = await env.post.get("p")
    assert done is not None and done.state == "delivered"
    assert done.prepared == {"what": "invite", "grant": "sealed-2"}
    assert await env.log() == [["p", "invite/sealed-2"]] and pa.ATTEMPTS["p"] == 2


async def test_two_executors_on_one_database_deliver_each_envelope_once_in_order(
        env: Env) -> None:
    """PO-9: two executors sharing the database claim with row locks: every envelope is
    attempted once (no double claim) and each address receives its events in order."""
    other = PostgresPost(env.pool, pa.ROUTES, env.deliver, clock=env.rt.clock, rng=env.rt.rng)
    for i in range(40):
        await env.send(f"k{i:02d}", to="ab"[i % 2], text=f"{i}")
    async with anyio.create_task_group() as tg:
        for post in (env.post, other, env.post, other):
            tg.start_soon(post.run)
    await env.drain()
    assert await env.log("a") == [[f"k{i:02d}", f"{i}"] for i in range(0, 40, 2)]
    assert await env.log("b") == [[f"k{i:02d}", f"{i}"] for i in range(1, 40, 2)]
    assert set(pa.ATTEMPTS.values()) == {1}


async def test_held_letters_count_nothing_and_receipts_ride_dead_letters(env: Env) -> None:
    """PO-12 on PostgreSQL: while the head of an address fails three times, the letters behind
    it are queued with no attempt and no run at each of its invocations (seen on another
    connection); afterwards every job's attempts equal its receiver's invocations; a refusal's
    receipt and a spent budget's last receipt are kept on their dead letters."""
    pa.SCRIPT["e0"] = ["fail"] * 3
    pa.SCRIPT["r"] = ["refuse_receipt"]
    pa.SCRIPT["f"] = ["fail_receipt"] * 8
    seen: list[dict[str, tuple[str, int, int]]] = []

    def snapshot(key: str) -> None:
        if key == "e0":
            with psycopg.connect(env.dsn) as c:
                seen.append({k: (s, a, r) for k, s, a, r in c.execute(
                    "SELECT key, state, attempts, runs FROM post_jobs").fetchall()})

    pa.ON_DELIVER.append(snapshot)
    for i in range(4):
        await env.send(f"e{i}", text=f"t{i}")
    await env.send("r", to="b", text="r")
    await env.send("f", to="b", text="f")
    await env.drain()
    assert len(seen) == 4
    for rows in seen:
        assert {rows[f"e{i}"] for i in (1, 2, 3)} == {("queued", 0, 0)}
    for i in range(4):
        job = await env.post.get(f"e{i}")
        assert job is not None and (job.state, job.attempts) == ("delivered", pa.ATTEMPTS[f"e{i}"])
    assert pa.ATTEMPTS["e1"] == 1
    page = await env.post.dead_letters()
    dead = {d.key: d for d in page.letters}
    assert (dead["r"].receipt, dead["r"].attempts) == ({"checked": "directory", "attempt": 1}, 1)
    assert (dead["f"].reason, dead["f"].receipt, dead["f"].attempts) == (
        "retry_budget_spent:busy", {"queue": 8}, 8)
