"""Hand-off to running consumers (Q-1, Q-2): what a process sends to a queue its own ``Consumer.run``
takes is delivered once, never to a second process while held, and given back when the consumer stops.

Two services on one SQLite file stand for two processes of a cluster (each its own connection, one
FakeClock). Leases run on the FakeClock; ``run()`` uses real time only for its poll waits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from mailbox_actors.platform.clock import FakeClock, SystemClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.queues import Consumer, Message, QueueService
from mailbox_actors.platform.rng import SeededRng

T0 = 1_767_225_600_000
LEASE_MS = 30_000
ROOM = 512  # hand-off room of one running consumer (queue_consumer._HANDOFF_ROOM)


def job(n: int) -> dict[str, Any]:
    return {"v": 1, "kind": "t", "n": n}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@asynccontextmanager
async def two_processes(tmp_path: Path, clock: FakeClock, pg_dsn: str | None
                        ) -> AsyncIterator[tuple[QueueService, QueueService]]:
    """Two services on one file, as two node processes would open it (own seeds: distinct ids);
    or on one PostgreSQL database through two pools (``backend``: every test here runs on both,
    CL-7: the hand-off and the acks behind stay within a process on either)."""
    if pg_dsn is None:
        path = tmp_path / "queues.sqlite"
        a = QueueService(path, clock=clock, ids=Ids(clock, SeededRng(1)))
        b = QueueService(path, clock=clock, ids=Ids(clock, SeededRng(2)))
    else:
        from mailbox_actors.platform.postgres.database import PgDatabase
        from mailbox_actors.platform.queues.postgres import queues_on
        a = queues_on(PgDatabase(pg_dsn, retry_for_s=10), clock=clock,
                      ids=Ids(clock, SeededRng(1)))
        b = queues_on(PgDatabase(pg_dsn, retry_for_s=10), clock=clock,
                      ids=Ids(clock, SeededRng(2)))
    async with a, b:
        yield a, b


class Blocker:
    """A handler that notes each delivery (n, attempts) and blocks on the first message it gets
    until ``go`` is set (forever if never): what it holds meanwhile stays held."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.holding = anyio.Event()
        self.go = anyio.Event()

    async def __call__(self, msg: Message) -> None:
        self.seen.append((msg.body["n"], msg.attempts))
        if len(self.seen) == 1:
            self.holding.set()
            await self.go.wait()


@asynccontextmanager
async def running(queues: QueueService, handler: Callable[[Message], Awaitable[None]],
                  **options: Any) -> AsyncIterator[Consumer]:
    """``Consumer.run`` (no batch timeout) in a task, cancelled on exit, as a node stops it."""
    options = {"poll_interval_s": 3_600, "visibility_ms": LEASE_MS, **options}
    consumer = Consumer(queues, "jobs", handler, max_batch_timeout_s=0, **options)
    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer.run)
        await anyio.wait_all_tasks_blocked()  # run() has started, so it takes what is sent
        yield consumer
        tg.cancel_scope.cancel()


async def wait(event: anyio.Event) -> None:
    with anyio.fail_after(5):
        await event.wait()


async def hold(queues: QueueService, blocker: Blocker) -> None:
    """Send message 0 and wait until the consumer is stuck on it: it takes nothing more."""
    await queues.send("jobs", job(0))
    await wait(blocker.holding)


async def receive_all(queues: QueueService) -> list[Message]:
    out: list[Message] = []
    while batch := await queues.receive("jobs", max_batch_size=100, visibility_ms=LEASE_MS):
        out += batch
    return out


@pytest.mark.anyio
async def test_sent_while_running_is_delivered_once_and_acked(
        tmp_path: Path, clock: FakeClock, pg_dsn: str | None) -> None:
    """Q-1: a message sent while a consumer runs is handled once, as a first delivery, and once the
    consumer is stopped the queue is empty (its ack, written behind, was written)."""
    seen: list[tuple[int, int]] = []
    got = anyio.Event()

    async def handler(msg: Message) -> None:
        seen.append((msg.body["n"], msg.attempts))
        got.set()

    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        async with running(a, handler) as consumer:
            await a.send("jobs", job(7))
            await wait(got)
        assert seen == [(7, 1)] and consumer.handled == 1
        assert await b.depth("jobs") == 0


@pytest.mark.anyio
async def test_held_messages_reach_another_process_only_after_their_lease(
        tmp_path: Path, clock: FakeClock, pg_dsn: str | None) -> None:
    """Q-1: messages handed to a running consumer are leased in the file: another process claims
    none of them while it lives, and if it dies holding them (never releasing) they are delivered
    there after the visibility timeout, counting the lost delivery."""
    blocker = Blocker()
    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        async with running(a, blocker):
            await hold(a, blocker)
            await a.send_batch("jobs", [job(n) for n in range(1, 6)])
            assert await b.receive("jobs", max_batch_size=100) == []
            assert (await b.stats())["jobs"]["in_flight"] == 6

            await clock.advance(LEASE_MS - 1)
            assert await b.receive("jobs", max_batch_size=100) == []
            await clock.advance(1)  # process a is stuck for good: as if it had crashed
            taken = await receive_all(b)
            assert sorted((m.body["n"], m.attempts) for m in taken) == [(n, 2) for n in range(6)]
        # a stops now; what it still held is b's: giving it back must not touch b's leases.
        assert blocker.seen == [(0, 1)]
        assert (await b.stats())["jobs"]["in_flight"] == 6
        await b.ack_many("jobs", [m.id for m in taken])
        assert await b.depth("jobs") == 0


@pytest.mark.anyio
async def test_stopping_the_consumer_releases_what_it_held(
        tmp_path: Path, clock: FakeClock, pg_dsn: str | None) -> None:
    """Q-1: a consumer stopped with messages still held gives them back at once, as if never
    delivered; the one it was handling stays leased until its visibility timeout."""
    blocker = Blocker()
    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        async with running(a, blocker):
            await hold(a, blocker)
            await a.send_batch("jobs", [job(n) for n in range(1, 6)])
        taken = await receive_all(b)  # no clock advance
        assert sorted((m.body["n"], m.attempts) for m in taken) == [(n, 1) for n in range(1, 6)]
        await b.ack_many("jobs", [m.id for m in taken])

        await clock.advance(LEASE_MS)
        assert [(m.body["n"], m.attempts) for m in await receive_all(b)] == [(0, 2)]
        assert blocker.seen == [(0, 1)]


@pytest.mark.anyio
async def test_a_send_past_the_room_is_visible_to_every_process(
        tmp_path: Path, clock: FakeClock, pg_dsn: str | None) -> None:
    """Q-1: a running consumer is handed at most its room; the rest of a send is inserted visible,
    so another process takes it at once."""
    blocker = Blocker()
    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        async with running(a, blocker):
            await hold(a, blocker)
            sent = await a.send_batch("jobs", [job(n) for n in range(1, 601)])
            assert (await b.stats())["jobs"]["ready"] == len(sent) - ROOM
            taken = await receive_all(b)
            assert len(taken) == len(sent) - ROOM
            assert {m.attempts for m in taken} == {1}
            assert {m.id for m in taken} <= set(sent)
            assert blocker.seen == [(0, 1)]


@pytest.mark.anyio
async def test_a_message_held_past_half_its_lease_is_given_back(
        tmp_path: Path, clock: FakeClock, pg_dsn: str | None) -> None:
    """Q-1: held messages whose lease is half gone are not handled under it: they go back to the
    queue as never delivered (another process claims them at once), and the one this consumer
    handles next is claimed afresh, so it is not redelivered when the old lease ends."""
    blocker = Blocker()
    second = anyio.Event()

    async def handler(msg: Message) -> None:
        await blocker(msg)
        if len(blocker.seen) == 2:
            second.set()
            await anyio.sleep_forever()  # still working when the old lease would have lapsed

    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        async with running(a, handler, max_batch_size=1):
            await hold(a, blocker)
            await a.send_batch("jobs", [job(n) for n in range(1, 6)])
            await clock.advance(LEASE_MS // 2 + 5_000)
            blocker.go.set()
            await wait(second)
            assert blocker.seen == [(0, 1), (1, 1)]
            taken = await receive_all(b)
            assert sorted((m.body["n"], m.attempts) for m in taken) == [(n, 1) for n in range(2, 6)]

            await clock.advance(LEASE_MS // 2)  # past the lease message 1 was handed over with
            # (Message 0's ack is written behind on real time: b may still see it; not message 1.)
            assert {m.body["n"] for m in await b.receive("jobs", max_batch_size=100)} <= {0}


@pytest.mark.anyio
async def test_acks_written_behind_survive_cancellation(
        tmp_path: Path, clock: FakeClock, pg_dsn: str | None) -> None:
    """Q-1: every message a running consumer handled is acked even when it is stopped right after
    the last handler returns: none is delivered again."""
    total = 400
    done = anyio.Event()
    handled: list[int] = []

    async def handler(msg: Message) -> None:
        handled.append(msg.body["n"])
        if len(handled) == total:
            done.set()

    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        async with running(a, handler, max_batch_size=100):
            for start in range(0, total, 100):
                await a.send_batch("jobs", [job(n) for n in range(start, start + 100)])
            await wait(done)
        assert sorted(handled) == list(range(total))
        assert await b.depth("jobs") == 0
        await clock.advance(LEASE_MS)
        assert await b.receive("jobs") == []


@pytest.mark.anyio
async def test_a_raising_handler_gets_the_message_again(
        tmp_path: Path, clock: FakeClock, pg_dsn: str | None) -> None:
    """Q-2: under run(), a handed-over message whose handler raises is retried, not acked: it is
    delivered again with its attempts counted, and acked once a delivery succeeds."""
    seen: list[int] = []
    done = anyio.Event()

    async def handler(msg: Message) -> None:
        seen.append(msg.attempts)
        if msg.attempts == 1:
            raise ValueError("first try fails")
        done.set()

    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        async with running(a, handler):
            await a.send("jobs", job(1))
            await wait(done)
        assert seen == [1, 2]
        assert await b.depth("jobs") == 0


@pytest.mark.anyio
async def test_taken_batch_is_released_on_stop(tmp_path: Path, clock: FakeClock, pg_dsn: str | None) -> None:
    """Q-1: messages handed over in one send and taken as one batch, unhandled when the consumer is
    stopped, are given back at once like the rest of what it held."""
    blocker = Blocker()
    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        async with running(a, blocker):
            await a.send_batch("jobs", [job(n) for n in range(6)])
            await wait(blocker.holding)
        taken = await receive_all(b)
        assert sorted((m.body["n"], m.attempts) for m in taken) == [(n, 1) for n in range(1, 6)]


# ---- found by review: the file is still read while hand-offs keep coming ------------------------


class Watch:
    """A handler that sets ``seen`` when message ``n`` arrives."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = anyio.Event()

    async def __call__(self, msg: Message) -> None:
        if msg.body["n"] == self.n:
            self.seen.set()


async def send_until(queues: QueueService, seen: anyio.Event) -> None:
    """Keep this process's consumers busy with hand-offs until ``seen``: each send wakes them."""
    n = 1_000
    with anyio.fail_after(5):
        while not seen.is_set():
            await queues.send("jobs", job(n))
            n += 1
            await anyio.lowlevel.checkpoint()  # the consumers take it; no pause to poll in


@pytest.mark.anyio
@pytest.mark.parametrize("consumers", [1, 4])
async def test_another_process_message_is_read_while_hand_offs_keep_coming(
        tmp_path: Path, clock: FakeClock, pg_dsn: str | None, consumers: int) -> None:
    """Q-1: a message another process sent is claimed within a poll interval even while this
    process's own sends wake its consumers without end (a wake must not put off the file read)."""
    watch = Watch(1)
    async with two_processes(tmp_path, clock, pg_dsn) as (a, b):
        cs = [Consumer(a, "jobs", watch, max_batch_timeout_s=0, poll_interval_s=0.02,
                       visibility_ms=LEASE_MS) for _ in range(consumers)]
        async with anyio.create_task_group() as tg:
            for c in cs:
                tg.start_soon(c.run)
            await anyio.wait_all_tasks_blocked()
            await b.send("jobs", job(1))  # no wake reaches process a
            await send_until(a, watch.seen)
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_own_delayed_send_is_handled_while_hand_offs_keep_coming(tmp_path: Path) -> None:
    """Q-1: a delayed send (the webhook retry) becomes due while hand-offs keep waking the
    consumer: it is handled, its due time not forgotten."""
    watch = Watch(1)
    clock = SystemClock()
    async with two_processes(tmp_path, clock, None) as (a, _):  # type: ignore[arg-type]
        async with running(a, watch, poll_interval_s=0.02):
            await a.send("jobs", job(1), delay_seconds=0.05)
            await send_until(a, watch.seen)


@pytest.mark.anyio
async def test_a_send_racing_the_last_consumer_stopping_is_given_back(
        tmp_path: Path, clock: FakeClock) -> None:
    """Q-1: a send that chose the hand-off, then waited for the file while the last consumer
    stopped, makes its message visible to every process instead of leaving it leased to nobody.
    (The SQLite file only: another process's lock on it makes the wait.)"""
    async with two_processes(tmp_path, clock, None) as (a, b):
        other = sqlite3.connect(tmp_path / "queues.sqlite", isolation_level=None)
        sent = anyio.Event()

        async def send() -> None:
            await a.send("jobs", job(1))
            sent.set()

        async with anyio.create_task_group() as outer:
            async with running(a, Watch(1)):
                other.execute("BEGIN IMMEDIATE")  # another process writes: a's INSERT waits
                outer.start_soon(send)
                await anyio.wait_all_tasks_blocked()
            other.execute("COMMIT")
            await wait(sent)
        other.close()
        assert [(m.body["n"], m.attempts) for m in await receive_all(b)] == [(1, 1)]


@pytest.mark.anyio
async def test_a_failed_give_back_does_not_drop_the_batch_taken_with_it(
        tmp_path: Path, clock: FakeClock) -> None:
    """Q-1: when giving back stale messages fails (the file stays locked), the fresh message taken
    with them is still handled."""
    seen_2 = Watch(2)
    blocker = Blocker()

    async def handler(msg: Message) -> None:
        await seen_2(msg)
        await blocker(msg)

    path = tmp_path / "queues.sqlite"
    async with QueueService(path, clock=clock, ids=Ids(clock, SeededRng(1)),
                            busy_timeout_ms=20) as a:
        other = sqlite3.connect(path, isolation_level=None)
        # A 1 s lease: a message is stale once held 500 ms (half its lease), before the
        # hand-off counts as behind (BEHIND_MS) and sends go to the file instead.
        async with running(a, handler, max_batch_size=1, visibility_ms=1_000):
            await hold(a, blocker)
            await a.send("jobs", job(1))
            await clock.advance(600)      # message 1 is stale at the next take
            await a.send("jobs", job(2))  # held, fresh
            other.execute("BEGIN IMMEDIATE")
            blocker.go.set()
            await wait(seen_2.seen)
            other.execute("COMMIT")
        other.close()
