"""What the shared state does on PostgreSQL beyond the contract both backends meet (CL-7, CL-14),
against a real server started and stopped by pid for the session (``conftest``): a send in one
process wakes another's idle consumer by NOTIFY (one of a process's consumers, whose claim serves
its idle siblings), and the door's address cache by NOTIFY too; the outbox's index rows and queue
messages are one transaction, so a refused queue write leaves no index row either."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

import _post_actors as pa
from _pg import PgServer, new_database
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.control.addresses import EPOCH_CHANNEL, AddressBook, add_addresses
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.control.postgres import control_on
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.postgres.database import PgDatabase
from mailbox_actors.platform.queues import Consumer, Message, QueueService
from mailbox_actors.platform.queues.postgres import queues_on
from mailbox_actors.platform.queues.service import NOTIFY_CHANNEL
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.post.executor import Claimed
from mailbox_actors.post.pg_schema import MIGRATIONS, apply_schema
from mailbox_actors.post.postgres import PostgresPost
from mailbox_actors.testing import TestRuntime
from mailbox_actors.webhooks.publish import WEBHOOKS_QUEUE, ControlEventSink
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.events import Event
from mailbox_actors.wire.post import PostDeliver, PostEnvelope

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MAILBOX = "a" * 64


class Woken:
    running = waiting = False  # a QueueWatcher driven by hand: told every time

    def __init__(self) -> None:
        self.at: list[int] = []
        self.event = anyio.Event()

    def on_visible(self, at_ms: int) -> None:
        self.at.append(at_ms)
        self.event.set()


@pytest.fixture
async def dsn(pg_server: PgServer) -> AsyncIterator[str]:
    yield new_database(pg_server)


async def test_a_send_in_one_process_wakes_the_others_consumers(dsn: str) -> None:
    """CL-7: no polling between processes: the messages table's trigger notifies ``ma_queues``
    with the queue's name and the other service's watchers of that queue are told at once
    (a watcher of another queue is not)."""
    clock = FakeClock()
    a = queues_on(PgDatabase(dsn), clock=clock, ids=Ids(clock, SeededRng(1)))
    b = queues_on(PgDatabase(dsn), clock=clock, ids=Ids(clock, SeededRng(2)))
    jobs, other = Woken(), Woken()
    b.watch("jobs", jobs)
    b.watch("other", other)
    heard: list[str | None] = []
    got_jobs = anyio.Event()

    def hear(payload: str | None) -> None:
        heard.append(payload)
        if payload == "jobs":
            got_jobs.set()

    notifications = b._store.notifications()
    assert notifications is not None
    notifications.subscribe(NOTIFY_CHANNEL, hear)  # after the service's own: it is told first
    async with a, b:
        assert a.notified and b.notified
        await a.send("jobs", {"v": 1, "kind": "job"})
        with anyio.fail_after(10):  # a bound, not a speed check
            await got_jobs.wait()
        assert jobs.at and len(other.at) == heard.count(None)  # "other" only on (re)connection
        assert [m.body["kind"] for m in await b.receive("jobs")] == ["job"]
        assert set(heard) <= {None, "jobs"}


async def test_one_claim_serves_a_process_s_idle_consumers_and_leaves_the_rest(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """CL-7, Q-1: a notification wakes ONE idle consumer of a process (not every consumer of
    every process: all but one would claim nothing); its claim takes a message for itself and one
    for each idle sibling, handed to them, and no more: what this process cannot start now stays
    visible for another process to claim."""
    clock = FakeClock()
    a = queues_on(PgDatabase(dsn), clock=clock, ids=Ids(clock, SeededRng(1)))
    b = queues_on(PgDatabase(dsn), clock=clock, ids=Ids(clock, SeededRng(2)))
    started: list[int] = []
    four, go = anyio.Event(), anyio.Event()

    async def handler(msg: Message) -> None:
        started.append(msg.body["n"])
        if len(started) == 4:
            four.set()
        await go.wait()

    claims: list[tuple[int, int]] = []  # (asked for, got) of each claim process a made
    receive = a.receive

    async def counted(queue: str, **options: Any) -> list[Message]:
        got = await receive(queue, **options)
        claims.append((options["max_batch_size"], len(got)))
        return got

    monkeypatch.setattr(a, "receive", counted)
    async with a, b:
        consumers = [Consumer(a, "jobs", handler, max_batch_size=1, max_batch_timeout_s=0,
                              poll_interval_s=3_600) for _ in range(4)]
        async with anyio.create_task_group() as tg:
            for consumer in consumers:
                tg.start_soon(consumer.run)
            with anyio.fail_after(10):  # bounds, not speed checks
                while not all(c.waiting for c in consumers):  # noqa: ASYNC110 - each looks once first
                    await anyio.sleep(0.01)
                claims.clear()
                await b.send_batch("jobs", [{"v": 1, "kind": "t", "n": n} for n in range(8)])
                await four.wait()
            assert claims == [(4, 4)]
            assert sorted(started) == [0, 1, 2, 3]
            left = await b.receive("jobs", max_batch_size=100)
            assert sorted(m.body["n"] for m in left) == [4, 5, 6, 7]
            go.set()
            tg.cancel_scope.cancel()


async def test_the_address_cache_follows_changes_made_elsewhere(dsn: str) -> None:
    """CL-7, IN-5: the door's AddressBook answers from memory while nothing changed, and a change
    made through another process's connection is seen at the next look (NOTIFY
    ``ma_address_epoch``)."""
    clock = FakeClock()
    here = control_on(PgDatabase(dsn), clock=clock, ids=Ids(clock, SeededRng(1)))
    there = control_on(PgDatabase(dsn), clock=clock, ids=Ids(clock, SeededRng(2)))
    book = AddressBook(here)
    changed = Woken()
    notifications = here.store.notifications()
    assert notifications is not None
    notifications.subscribe(EPOCH_CHANNEL, lambda _payload: changed.on_visible(0))
    async with here, there:
        tenant = await there.create_tenant("acme")
        ident = await there.create_identity(tenant.id, "ops", MAILBOX)
        await there.set_identity_status(ident.id, "active")
        assert await book.resolve("ops@acme.example") is None
        changed.event = anyio.Event()
        await add_addresses(there, ident.id, ["ops@acme.example"], clock.now_ms())
        with anyio.fail_after(10):  # a bound, not a speed check
            await changed.event.wait()
        found = await book.resolve("ops@acme.example")
        assert found is not None and found.mailbox_id == MAILBOX
        changed.event = anyio.Event()
        await there.set_identity_status(ident.id, "erased")
        with anyio.fail_after(10):
            await changed.event.wait()
        assert await book.resolve("ops@acme.example") is None
    book.close()


def _event(n: int, tenant_id: str) -> Event:
    return Event(id=f"evt_{n:04d}", type="identity.noted", sequence=n, tenant_id=tenant_id,
                 occurred_at_ms=n)


async def test_dispatch_writes_index_and_queue_in_one_transaction(dsn: str) -> None:
    """CL-14: on PostgreSQL the outbox's dispatch writes the event index and the webhook messages
    in one transaction: when the queue write is refused, the index has no row of the group
    either, and the group written again later lands whole."""
    clock = FakeClock()
    db = PgDatabase(dsn)
    control: ControlDb = control_on(db, clock=clock, ids=Ids(clock, SeededRng(1)))
    queues: QueueService = queues_on(db, clock=clock, ids=Ids(clock, SeededRng(2)))
    async with control, queues:
        sink = ControlEventSink(control, queues)
        tenant = await control.create_tenant("acme")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            await admin.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION 'queue refused'; END $$")
            await admin.execute("CREATE TRIGGER refuse BEFORE INSERT ON messages FOR EACH ROW "
                                "EXECUTE FUNCTION refuse()")
            with pytest.raises(MailboxActorsError):
                await sink.publish("identity_mailbox", MAILBOX,
                                   [_event(n, tenant.id) for n in (1, 2)])
            assert await control.events(tenant.id) == []
            assert await queues.depth(WEBHOOKS_QUEUE) == 0
            await admin.execute("DROP TRIGGER refuse ON messages")
        await sink.publish("identity_mailbox", MAILBOX, [_event(n, tenant.id) for n in (1, 2)])
        assert [e.event_id for e in await control.events(tenant.id)] == ["evt_0001", "evt_0002"]
        assert await queues.depth(WEBHOOKS_QUEUE) == 2


async def test_post_runs_on_the_control_database_in_the_producers_transaction(dsn: str) -> None:
    """PO-9, PO-8 (ADR 0018): on a cluster whose control data is in PostgreSQL, Post on that
    database is ``PostgresPost`` on the control data's own pool: its schema beside the control
    schema, an envelope written in the same transaction as a control-data change (rolled back with
    it, or committed with it), and delivered by its executor."""
    pa.reset()
    clock = FakeClock()
    db = control_on(PgDatabase(dsn), clock=clock, ids=Ids(clock, SeededRng(1)))
    async with db, TestRuntime(objects=pa.POST_OBJECTS) as rt:
        oid = rt.id_from_name("post_receiver", "a")
        await rt.call("post_receiver", oid, pa.RInit(), tenant_id=pa.TENANT)

        async def deliver(job: Claimed, env: PostEnvelope, deadline_ms: int) -> Any:
            return await rt.call(job.namespace, rt.id_from_name(job.namespace, job.object_name),
                                 PostDeliver(envelope=env, attempt=job.attempts),
                                 tenant_id=pa.TENANT, deadline_ms=deadline_ms)

        pool = db.store.db.pool  # type: ignore[attr-defined]
        post = PostgresPost(pool, pa.ROUTES, deliver, clock=rt.clock, rng=rt.rng)
        async with pool.connection() as conn, conn.transaction():
            assert await apply_schema(conn) == len(MIGRATIONS)
        tenant = await db.create_tenant("acme")
        change = "UPDATE tenants SET status = 'suspended' WHERE id = %s"
        with pytest.raises(RuntimeError, match="boom"):
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(change, (tenant.id,))
                await post.send(conn, pa.NOTE, pa.Inbox("a"), pa.Note("gone"), "k0")
                raise RuntimeError("boom")
        assert await post.get("k0") is None
        assert (await db.find_tenant(tenant.id)).status == "active"  # type: ignore[union-attr]
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(change, (tenant.id,))
            assert await post.send(conn, pa.NOTE, pa.Inbox("a"), pa.Note("kept"), "k1") == "queued"
        assert (await db.find_tenant(tenant.id)).status == "suspended"  # type: ignore[union-attr]
        assert await post.run() == 1
        record = await post.get("k1")
        assert record is not None and record.state == "delivered"
