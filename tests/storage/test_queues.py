"""Durable queues (Q-1, Q-2): sends, claims, retries, dead letters, crashes and several processes.

Time comes only from FakeClocks, advanced by the tests; consumers are driven by ``clock.advance`` or
``drain()``. The cross-process tests run small child programs (``_CHILD``) on the same SQLite file.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog

from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.metrics import Metrics
from mailbox_actors.platform.queues import (
    MAX_BODY_BYTES,
    Consumer,
    DeadLetterRecorder,
    Message,
    QueueService,
    age_ms,
    reenqueue_with_attempt,
)
from mailbox_actors.platform.queues.bodies import encode_body
from mailbox_actors.platform.queues.schema import SCHEMA_VERSION
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

T0 = 1_767_225_600_000


def job(n: int = 0, kind: str = "job", **extra: Any) -> dict[str, Any]:
    return {"v": 1, "kind": kind, "n": n, **extra}


def service(path: Path, clock: FakeClock, *, seed: int = 0, metrics: Any = None) -> QueueService:
    # Each service gets its own seed: two generators on one FakeClock and one seed would mint the
    # same ids (real processes use SystemRng).
    return QueueService(path, clock=clock, ids=Ids(clock, SeededRng(seed)), metrics=metrics)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
async def queues(tmp_path: Path, clock: FakeClock, pg_dsn: str | None
                 ) -> AsyncIterator[QueueService]:
    """The queues on each backend (``backend``: the SQLite file, PostgreSQL): the tests taking
    it are the contract both meet (CL-7)."""
    if pg_dsn is None:
        q = service(tmp_path / "queues.sqlite", clock)
    else:
        from mailbox_actors.platform.postgres.database import PgDatabase
        from mailbox_actors.platform.queues.postgres import queues_on
        q = queues_on(PgDatabase(pg_dsn, retry_for_s=10), clock=clock,
                      ids=Ids(clock, SeededRng(0)))
    async with q:
        yield q


def shared(path: Path, clock: FakeClock, pg_dsn: str | None, *, seed: int) -> QueueService:
    """A service of its own on the SQLite file at ``path``, or on ``pg_dsn``'s database (its own
    pool and listening connection, as another process would have)."""
    if pg_dsn is None:
        return service(path, clock, seed=seed)
    from mailbox_actors.platform.postgres.database import PgDatabase
    from mailbox_actors.platform.queues.postgres import queues_on
    return queues_on(PgDatabase(pg_dsn, retry_for_s=10), clock=clock,
                     ids=Ids(clock, SeededRng(seed)))


@pytest.fixture
async def sqlite_queues(tmp_path: Path, clock: FakeClock) -> AsyncIterator[QueueService]:
    """The queues on the SQLite file only: for a test that reaches into the file itself."""
    async with service(tmp_path / "queues.sqlite", clock) as q:
        yield q


@asynccontextmanager
async def attached(clock: FakeClock, *works: Consumer) -> AsyncIterator[None]:
    for w in works:
        clock.attach(w)
    try:
        yield
    finally:
        for w in works:
            clock.detach(w)


class Recorder:
    """A handler that notes (clock time, id, attempts, n) of each delivery, then does ``then``."""

    def __init__(self, clock: FakeClock, then: str = "return") -> None:
        self.clock = clock
        self.then = then
        self.seen: list[tuple[int, str, int, int]] = []

    async def __call__(self, msg: Message) -> None:
        self.seen.append((self.clock.now_ms(), msg.id, msg.attempts, msg.body["n"]))
        if self.then == "retry":
            await msg.retry()
        elif self.then == "raise":
            raise ValueError("secret subject line")

    def ns(self) -> list[int]:
        return [n for _, _, _, n in self.seen]


# ---- send, receive, ack ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_send_receive_ack(queues: QueueService, clock: FakeClock) -> None:
    """Q-1: sent bodies are received oldest first with qm_ ids, held while in flight, and an acked
    message is never delivered again while an unacked one comes back after its visibility timeout."""
    ids = [await queues.send("jobs", job(n)) for n in range(3)]
    assert all(i.startswith("qm_") for i in ids) and len(set(ids)) == 3

    got = await queues.receive("jobs", visibility_ms=30_000)
    assert [m.id for m in got] == ids
    assert [m.body for m in got] == [job(0), job(1), job(2)]
    assert {(m.queue, m.attempts, m.enqueued_at_ms, m.kind) for m in got} == {("jobs", 1, T0, "job")}
    assert await queues.receive("jobs") == []  # all in flight

    await got[0].ack()
    await queues.ack_many("jobs", [got[1].id])
    await clock.advance(30_000)
    again = await queues.receive("jobs")
    assert [(m.id, m.attempts) for m in again] == [(ids[2], 2)]
    await again[0].ack()
    await clock.advance(60_000)
    assert await queues.receive("jobs") == []
    assert await queues.depth("jobs") == 0


@pytest.mark.anyio
async def test_delay_seconds_is_respected(queues: QueueService, clock: FakeClock) -> None:
    """Q-1: a message sent with delay_seconds is invisible until the FakeClock reaches it, and a
    consumer handles it at exactly that instant."""
    rec = Recorder(clock)
    consumer = Consumer(queues, "jobs", rec, max_batch_timeout_s=0)
    async with attached(clock, consumer):
        await queues.send("jobs", job(1), delay_seconds=10)
        assert await queues.receive("jobs", max_retries=3) == []
        assert await queues.next_visible_ms("jobs") == T0 + 10_000
        await clock.advance(9_999)
        assert rec.seen == []
        await clock.advance(5_000)
    assert [(t, n) for t, _, _, n in rec.seen] == [(T0 + 10_000, 1)]
    assert await queues.next_visible_ms("jobs") is None


@pytest.mark.anyio
async def test_batch_is_delivered_when_full_or_after_the_batch_timeout(
        queues: QueueService, clock: FakeClock) -> None:
    """Q-1: a consumer delivers a batch as soon as max_batch_size messages are ready, and a partial
    batch only once its oldest message has waited max_batch_timeout_s."""
    assert len(await queues.receive("other", max_batch_size=3)) == 0
    await queues.send_batch("other", [job(n) for n in range(5)])
    assert [m.body["n"] for m in await queues.receive("other", max_batch_size=3)] == [0, 1, 2]

    rec = Recorder(clock)
    consumer = Consumer(queues, "jobs", rec, max_batch_size=3, max_batch_timeout_s=5)
    async with attached(clock, consumer):
        await queues.send_batch("jobs", [job(0), job(1)])
        await clock.advance(4_999)
        assert rec.seen == []  # two of three: waits for the timeout
        await clock.advance(1)
        assert [(t - T0, n) for t, _, _, n in rec.seen] == [(5_000, 0), (5_000, 1)]

        await queues.send_batch("jobs", [job(n) for n in range(10, 17)])
        await clock.run_until_idle()
        assert rec.ns()[2:] == [10, 11, 12, 13, 14, 15]  # two full batches at once
        await clock.advance(4_999)
        assert len(rec.seen) == 8
        await clock.advance(1)
        assert rec.seen[-1][0] - T0 == 10_000 and rec.ns()[-1] == 16


@pytest.mark.anyio
async def test_retry_with_delay(queues: QueueService, clock: FakeClock) -> None:
    """Q-1: retry(delay_seconds) delivers the message again after the delay, counting the delivery."""
    seen: list[tuple[int, int]] = []

    async def handler(msg: Message) -> None:
        seen.append((clock.now_ms() - T0, msg.attempts))
        if msg.attempts == 1:
            await msg.retry(delay_seconds=30)
            await msg.ack()  # settled already: ignored

    consumer = Consumer(queues, "jobs", handler, max_batch_timeout_s=0)
    async with attached(clock, consumer):
        await queues.send("jobs", job())
        await clock.advance(29_000)
        assert seen == [(0, 1)]
        assert (await queues.stats())["jobs"]["delayed"] == 1
        await clock.advance(2_000)
    assert seen == [(0, 1), (30_000, 2)]
    assert await queues.depth("jobs") == 0


# ---- retries and dead letters ----------------------------------------------------------------


@pytest.mark.anyio
async def test_max_retries_then_dead_letter_recorded_and_counted(tmp_path: Path, clock: FakeClock
                                                                 ) -> None:
    """Q-1: a message retried max_retries times moves on its next retry to the dead-letter queue,
    whose recorder stores it with reason and attempts, logs it at error level and counts it."""
    metrics = Metrics()
    async with service(tmp_path / "q.sqlite", clock, metrics=metrics) as queues:
        rec = Recorder(clock, then="retry")
        consumer = Consumer(queues, "jobs", rec, max_retries=2, max_batch_timeout_s=0)
        recorder = DeadLetterRecorder(queues, consumer.dead_letter_queue)
        assert consumer.dead_letter_queue == "jobs-dlq"
        mid = await queues.send("jobs", job(7, ref="obj_1"))
        with structlog.testing.capture_logs() as logs:
            async with attached(clock, consumer, recorder):
                await clock.advance(1_000)
        assert [a for _, _, a, _ in rec.seen] == [1, 2, 3]
        letters = await queues.dead_letters("jobs")
        assert len(letters) == 1
        letter = letters[0]
        assert letter["message_id"] == mid and letter["kind"] == "job"
        assert letter["reason"] == "retries_exhausted" and letter["attempts"] == 3
        assert letter["body"] == job(7, ref="obj_1") and letter["dead_letter_queue"] == "jobs-dlq"
        assert letter["enqueued_at_ms"] == T0 and letter["recorded_at_ms"] == T0
        assert metrics.get("queue_dead_letters_total", (("queue", "jobs"),)) == 1
        assert (await queues.stats())["jobs"] == {"ready": 0, "delayed": 0, "in_flight": 0,
                                                  "dead_letters": 1}
        assert await queues.depth("jobs-dlq") == 0
        errors = [e for e in logs if e["event"] == "queue_dead_letter"]
        assert len(errors) == 1 and errors[0]["log_level"] == "error"
        assert errors[0]["message_id"] == mid and errors[0]["reason"] == "retries_exhausted"
        assert "body" not in errors[0]


@pytest.mark.anyio
async def test_a_raising_handler_does_not_stall_the_batch(queues: QueueService, clock: FakeClock
                                                          ) -> None:
    """Q-2: a handler that raises on one message has that message retried (logged with ids, kind
    and error type, no content) while the rest of the batch is handled once, in order; at its
    limit it is dead-lettered with the error as reason."""
    order: list[int] = []

    async def handler(msg: Message) -> None:
        order.append(msg.body["n"])
        if msg.body["n"] == 2:
            raise ValueError("secret subject line")

    consumer = Consumer(queues, "jobs", handler, max_retries=3, max_batch_timeout_s=0)
    recorder = DeadLetterRecorder(queues, "jobs-dlq")
    with structlog.testing.capture_logs() as logs:
        async with attached(clock, consumer, recorder):
            await queues.send_batch("jobs", [job(n) for n in range(5)])
            await clock.run_until_idle()
    assert order == [0, 1, 2, 3, 4, 2, 2, 2]
    [letter] = await queues.dead_letters("jobs")
    assert letter["reason"] == "handler_error: ValueError" and letter["attempts"] == 4
    assert await queues.depth("jobs") == 0
    failed = [e for e in logs if e["event"] == "queue_handler_failed"]
    assert len(failed) == 4
    assert failed[0]["error_type"] == "ValueError" and failed[0]["kind"] == "job"
    assert failed[0]["message_id"] == letter["message_id"]
    assert all("secret" not in repr(e) for e in logs)


@pytest.mark.anyio
async def test_raised_message_waits_retry_delay(queues: QueueService, clock: FakeClock) -> None:
    """Q-2: a consumer's retry_delay_s holds a message whose handler raised before its next
    delivery."""
    rec = Recorder(clock, then="raise")
    consumer = Consumer(queues, "jobs", rec, max_batch_timeout_s=0, retry_delay_s=10)
    async with attached(clock, consumer):
        await queues.send("jobs", job())
        await clock.advance(15_000)
    assert [(t - T0, a) for t, _, a, _ in rec.seen] == [(0, 1), (10_000, 2)]


@pytest.mark.anyio
async def test_handler_that_returns_without_settling_acks(queues: QueueService, clock: FakeClock
                                                          ) -> None:
    """Q-2: a message the handler neither acks nor retries is acked when the handler returns, and
    retry_all retries a whole batch at once."""
    rec = Recorder(clock)
    consumer = Consumer(queues, "jobs", rec)
    await queues.send_batch("jobs", [job(1), job(2)])
    assert await consumer.drain() == 2
    assert await queues.depth("jobs") == 0

    await queues.send_batch("jobs", [job(3), job(4)])
    batch = await queues.receive("jobs")
    await queues.retry_all(batch, delay_seconds=5)
    assert (await queues.stats())["jobs"]["delayed"] == 2
    await clock.advance(5_000)
    assert [m.attempts for m in await queues.receive("jobs")] == [2, 2]


# ---- crashes -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_consumer_cancelled_mid_batch_has_its_messages_redelivered(
        queues: QueueService, clock: FakeClock) -> None:
    """Q-1: a consumer stopped after claiming a batch but before settling it leaves its messages in
    flight; after the visibility timeout they are delivered again (counting the delivery), and the
    one it had acked is not."""
    holding = anyio.Event()

    async def stuck(msg: Message) -> None:
        if msg.body["n"] == 0:
            return  # acked
        holding.set()
        await anyio.sleep_forever()

    await queues.send_batch("jobs", [job(n) for n in range(5)])
    dying = Consumer(queues, "jobs", stuck, visibility_ms=30_000)
    async with anyio.create_task_group() as tg:
        tg.start_soon(dying.drain)
        with anyio.fail_after(10):
            await holding.wait()
        tg.cancel_scope.cancel()
    assert (await queues.stats())["jobs"]["in_flight"] == 4

    rec = Recorder(clock)
    survivor = Consumer(queues, "jobs", rec, max_batch_timeout_s=0)
    async with attached(clock, survivor):
        await clock.advance(29_999)
        assert rec.seen == []
        await clock.advance(1)
    assert [(t - T0, a, n) for t, _, a, n in rec.seen] == [(30_000, 2, n) for n in (1, 2, 3, 4)]
    assert await queues.depth("jobs") == 0


@pytest.mark.anyio
async def test_deliveries_that_always_time_out_end_in_the_dead_letter_queue(
        queues: QueueService, clock: FakeClock) -> None:
    """Q-1: a message whose consumers die on every delivery is dead-lettered (reason
    visibility_timeout) once max_retries + 1 deliveries have lapsed, instead of looping forever."""
    mid = await queues.send("jobs", job())
    for attempt in range(1, 4):
        [msg] = await queues.receive("jobs", max_retries=2, visibility_ms=1_000)
        assert msg.attempts == attempt
        await clock.advance(1_000)
    assert await queues.receive("jobs", max_retries=2) == []
    [letter] = await queues.receive("jobs-dlq", max_retries=None)
    assert letter.id == mid and letter.dead_letter is not None
    assert (letter.dead_letter.origin_queue, letter.dead_letter.reason,
            letter.dead_letter.attempts) == ("jobs", "visibility_timeout", 3)


_CHILD = r"""
import sys
from pathlib import Path

import anyio

from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.queues import Consumer, QueueService
from mailbox_actors.platform.rng import SystemRng


async def main(path: str, start_ms: str, mode: str) -> None:
    clock = FakeClock(int(start_ms))
    async with QueueService(Path(path), clock=clock, ids=Ids(clock, SystemRng())) as queues:
        if mode == "claim":
            batch = await queues.receive("jobs", max_batch_size=5, visibility_ms=30_000)
            print("CLAIMED", *[m.id for m in batch], flush=True)
            await anyio.sleep_forever()
        handled = []

        async def handle(msg):
            if not handled:  # hold the first batch until the test has seen every child hold one
                print("HOLDING", flush=True)
                await anyio.to_thread.run_sync(sys.stdin.readline)
            handled.append(msg.id)

        consumer = Consumer(queues, "jobs", handle, max_batch_size=5, max_batch_timeout_s=0)
        print("READY", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        await consumer.drain()
        print("HANDLED", *handled, flush=True)


anyio.run(main, *sys.argv[1:])
"""


@contextmanager
def children(n: int, path: Path, mode: str) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(path), str(T0), mode],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.communicate()


def line(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    text = proc.stdout.readline()
    assert text.endswith("\n"), f"child {proc.pid} ended (rc={proc.poll()})"
    return text.split()


@pytest.mark.anyio
async def test_process_killed_mid_batch_has_its_messages_redelivered(
        tmp_path: Path, clock: FakeClock) -> None:
    """Q-1: a consumer process SIGKILLed after claiming a batch leaves it in flight; another
    process's consumer gets every message of it after the visibility timeout."""
    path = tmp_path / "q.sqlite"
    async with service(path, clock) as queues:
        sent = await queues.send_batch("jobs", [job(n) for n in range(7)])
        with children(1, path, "claim") as [child]:
            words = line(child)
            assert words[0] == "CLAIMED" and words[1:] == sent[:5]
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        assert (await queues.stats())["jobs"] == {"ready": 2, "delayed": 0, "in_flight": 5,
                                                  "dead_letters": 0}
        rec = Recorder(clock)
        consumer = Consumer(queues, "jobs", rec, max_batch_timeout_s=0)
        async with attached(clock, consumer):
            await clock.advance(29_999)
            assert rec.ns() == [5, 6]
            await clock.advance(1)
        assert rec.ns() == [5, 6, 0, 1, 2, 3, 4]
        assert [a for _, _, a, _ in rec.seen] == [1, 1, 2, 2, 2, 2, 2]


# ---- several services on one file ----------------------------------------------------------------


@pytest.mark.anyio
async def test_two_services_never_double_deliver(tmp_path: Path, clock: FakeClock,
                                                 pg_dsn: str | None) -> None:
    """Q-1, CL-7: consumers on two services sharing one file (or, as two processes would, one
    PostgreSQL database through two pools: claims FOR UPDATE SKIP LOCKED), draining concurrently,
    handle every message exactly once."""
    path = tmp_path / "q.sqlite"
    async with shared(path, clock, pg_dsn, seed=1) as a, shared(path, clock, pg_dsn, seed=2) as b:
        sent = set(await a.send_batch("jobs", [job(n) for n in range(200)]))
        sent |= set(await b.send_batch("jobs", [job(n) for n in range(200, 400)]))
        handled: list[tuple[int, str]] = []
        started: set[int] = set()
        all_hold_a_batch = anyio.Event()

        def handler_for(k: int) -> Any:
            async def handle(msg: Message) -> None:
                # Nobody settles anything until all four hold a claimed batch at once.
                started.add(k)
                if len(started) == 4:
                    all_hold_a_batch.set()
                with anyio.fail_after(10):
                    await all_hold_a_batch.wait()
                handled.append((k, msg.id))
                await anyio.lowlevel.checkpoint()
            return handle

        consumers = [Consumer(svc, "jobs", handler_for(k), max_batch_size=7)
                     for k, svc in enumerate((a, b, a, b))]
        async with anyio.create_task_group() as tg:
            for c in consumers:
                tg.start_soon(c.drain)
        ids = [mid for _, mid in handled]
        assert len(ids) == len(set(ids)) == 400 and set(ids) == sent
        assert {k for k, _ in handled} == {0, 1, 2, 3}
        assert await a.depth("jobs") == 0


@pytest.mark.anyio
async def test_processes_never_double_deliver(tmp_path: Path, clock: FakeClock) -> None:
    """Q-1: three consumer processes draining one file at the same time (each holding a claimed
    batch while the others claim theirs) handle every message exactly once."""
    path = tmp_path / "q.sqlite"
    async with service(path, clock) as queues:
        sent = await queues.send_batch("jobs", [job(n) for n in range(600)])
        with children(3, path, "drain") as procs:
            for p in procs:
                assert line(p) == ["READY"]
            for word in ("START", "GO ON"):  # go on once all three hold a claimed batch
                for p in procs:
                    assert p.stdin is not None
                    p.stdin.write(f"{word}\n")
                    p.stdin.flush()
                if word == "START":
                    assert [line(p) for p in procs] == [["HOLDING"]] * 3
            per_process = []
            for p in procs:
                words = line(p)
                assert words[0] == "HANDLED"
                per_process.append(words[1:])
        handled = [mid for ids in per_process for mid in ids]
        assert len(handled) == len(set(handled)) == 600, [len(x) for x in per_process]
        assert all(per_process)  # every process held a batch while the others held theirs
        assert set(handled) == set(sent)
        assert await queues.depth("jobs") == 0


# ---- refusals ------------------------------------------------------------------------------------


def _sized(total: int) -> dict[str, Any]:
    """A valid body that encodes to exactly ``total`` bytes."""
    base = len(b'{"v":1,"kind":"job","pad":""}')
    return {"v": 1, "kind": "job", "pad": "x" * (total - base)}


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"in": value}
    return value


@pytest.mark.parametrize(("body", "names"), [
    ([1, 2], "JSON object"),
    ("text", "JSON object"),
    ({"kind": "job"}, '"v"'),
    ({"v": 2, "kind": "job"}, '"v" 2'),
    ({"v": True, "kind": "job"}, '"v"'),
    ({"v": "1", "kind": "job"}, '"v"'),
    ({"v": 1}, '"kind"'),
    ({"v": 1, "kind": 3}, '"kind"'),
    ({"v": 1, "kind": ""}, '"kind"'),
    ({"v": 1, "kind": "job", "ids": {1, 2}}, "body.ids: set"),
    ({"v": 1, "kind": "job", "at": object()}, "body.at: object"),
    ({"v": 1, "kind": "job", "x": [float("nan")]}, "body.x[0]"),
    ({"v": 1, "kind": "job", "raw": b"bytes"}, "body.raw: bytes"),
    ({"v": 1, "kind": "job", "m": {2: "a"}}, "keys must be strings"),
    ({"v": 1, "kind": "job", "e": {"data": {"n": 1, "x": [1, {"y": float("inf")}]}}},
     "body.e.data.x[1].y"),
    ({"v": 1, "kind": "job", "deep": _nested(40)}, "nested deeper than 32 levels"),
])
@pytest.mark.anyio
async def test_bad_bodies_are_refused(queues: QueueService, body: Any, names: str) -> None:
    """Q-1: a body that is not a JSON object with "v": 1 and a string "kind" is refused at send
    with invalid_request naming what is wrong, and nothing is enqueued."""
    with pytest.raises(MailboxActorsError) as refused:
        await queues.send("jobs", body)
    assert refused.value.code is ErrorCode.INVALID_REQUEST
    assert names in refused.value.message
    assert await queues.depth("jobs") == 0


@pytest.mark.anyio
async def test_body_over_128_kb_is_refused(queues: QueueService) -> None:
    """Q-1: a body of exactly 131,072 bytes encoded is accepted; one byte more is refused with
    limit_exceeded."""
    await queues.send("jobs", _sized(MAX_BODY_BYTES))
    with pytest.raises(MailboxActorsError) as refused:
        await queues.send("jobs", _sized(MAX_BODY_BYTES + 1))
    assert refused.value.code is ErrorCode.LIMIT_EXCEEDED
    assert refused.value.details == {"limit": "queue_body_bytes", "max": MAX_BODY_BYTES}
    [msg] = await queues.receive("jobs")
    assert msg.body == _sized(MAX_BODY_BYTES)


@pytest.mark.anyio
async def test_batch_with_one_bad_body_enqueues_nothing(queues: QueueService) -> None:
    """Q-1: send_batch is one transaction: one refused body (named by its index) enqueues none."""
    with pytest.raises(MailboxActorsError) as refused:
        await queues.send_batch("jobs", [job(0), {"v": 1}, job(2)])
    assert "bodies[1]" in refused.value.message
    with pytest.raises(MailboxActorsError) as too_big:
        await queues.send_batch("jobs", [job(0), _sized(MAX_BODY_BYTES + 1)])
    assert too_big.value.code is ErrorCode.LIMIT_EXCEEDED
    assert await queues.depth("jobs") == 0
    assert await queues.send_batch("jobs", []) == []


@pytest.mark.anyio
async def test_batch_beyond_one_statement_is_all_or_nothing(sqlite_queues: QueueService) -> None:
    """Q-1: a batch larger than one INSERT takes is still one transaction: a row refused in its
    second statement enqueues none; without it, every body arrives, in order."""
    queues = sqlite_queues
    holder = sqlite3.connect(queues.path, isolation_level=None)
    holder.execute("CREATE TRIGGER refuse_900 BEFORE INSERT ON messages "
                   "WHEN json_extract(NEW.body, '$.n') = 900 BEGIN SELECT RAISE(ABORT, 'no'); END")
    with pytest.raises(sqlite3.IntegrityError):
        await queues.send_batch("jobs", [job(n) for n in range(1_200)])
    assert await queues.depth("jobs") == 0
    holder.execute("DROP TRIGGER refuse_900")
    holder.close()
    sent = await queues.send_batch("jobs", [job(n) for n in range(1_200)])
    got: list[Message] = []
    while batch := await queues.receive("jobs", max_batch_size=100):
        got += batch
    assert [m.id for m in got] == sent
    assert [m.body["n"] for m in got] == list(range(1_200))


@pytest.mark.parametrize("name", ["", "Jobs", "1jobs", "-jobs", "jobs.dlq", "a b", "é", "a" * 64, 5])
@pytest.mark.anyio
async def test_bad_queue_names_are_refused(queues: QueueService, name: Any) -> None:
    """Q-1: queue names must match ^[a-z][a-z0-9_-]{0,62}$; anything else is invalid_request at
    send, receive and depth."""
    for call in (lambda: queues.send(name, job()), lambda: queues.receive(name),
                 lambda: queues.depth(name)):
        with pytest.raises(MailboxActorsError) as refused:
            await call()
        assert refused.value.code is ErrorCode.INVALID_REQUEST
    await queues.send("a" * 63, job())
    await queues.send("a_b-9", job())


@pytest.mark.anyio
async def test_bad_arguments_are_refused(queues: QueueService) -> None:
    """Q-1: negative or over-12-hour delays, batch sizes outside 1..100, a dead-letter queue named
    like its queue or too long to derive are invalid_request."""
    bad = [lambda: queues.send("jobs", job(), delay_seconds=-1),
           lambda: queues.send("jobs", job(), delay_seconds=43_201),
           lambda: queues.receive("jobs", max_batch_size=0),
           lambda: queues.receive("jobs", max_batch_size=101),
           lambda: queues.receive("jobs", dead_letter_queue="jobs"),
           lambda: queues.receive("a" * 63)]
    for call in bad:
        with pytest.raises(MailboxActorsError) as refused:
            await call()
        assert refused.value.code is ErrorCode.INVALID_REQUEST
    with pytest.raises(MailboxActorsError) as long_name:
        Consumer(queues, "a" * 63, Recorder(FakeClock()))
    assert "dead_letter_queue=" in long_name.value.message
    Consumer(queues, "a" * 63, Recorder(FakeClock()), dead_letter_queue="long-dlq")


# ---- numbers -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_stats_and_depth(queues: QueueService, clock: FakeClock) -> None:
    """Q-1: stats counts ready, delayed, in-flight and recorded dead letters per queue; depth is
    waiting plus in flight; a lapsed lease counts as ready again."""
    assert await queues.stats() == {}
    await queues.send_batch("jobs", [job(0), job(1)])
    await queues.send("jobs", job(2), delay_seconds=60)
    await queues.send("mail", job(3))
    [held] = await queues.receive("jobs", max_batch_size=1, visibility_ms=10_000)
    assert await queues.stats() == {
        "jobs": {"ready": 1, "delayed": 1, "in_flight": 1, "dead_letters": 0},
        "mail": {"ready": 1, "delayed": 0, "in_flight": 0, "dead_letters": 0},
    }
    assert await queues.depth("jobs") == 3 and await queues.depth("nothing") == 0
    await clock.advance(10_000)
    assert (await queues.stats())["jobs"] == {"ready": 2, "delayed": 1, "in_flight": 0,
                                              "dead_letters": 0}
    await held.ack()  # the lease lapsed but nobody took it: the ack still lands
    assert await queues.depth("jobs") == 2
    await clock.advance(50_000)
    assert (await queues.stats())["jobs"]["ready"] == 2


# ---- the retry schemes of seed section 7 --------------------------------------------------------


@pytest.mark.anyio
async def test_reenqueue_with_attempt_and_age(queues: QueueService, clock: FakeClock) -> None:
    """Q-2: the re-enqueue scheme sends a copy with attempt + 1 after the schedule's delay until
    the schedule is spent, independent of the delivery counter; age_ms measures from the body's
    own timestamp."""
    schedule = (2, 4)
    outcomes: list[tuple[int, int, int, str | None]] = []

    async def handler(msg: Message) -> None:
        new_id = await reenqueue_with_attempt(queues, "jobs", msg.body, schedule)
        outcomes.append((clock.now_ms() - T0, msg.body.get("attempt", 0), msg.attempts,
                         new_id and new_id[:3]))
        await msg.ack()

    consumer = Consumer(queues, "jobs", handler, max_batch_timeout_s=0)
    async with attached(clock, consumer):
        await queues.send("jobs", job(created_at_ms=T0))
        await clock.advance(10_000)
    assert outcomes == [(0, 0, 1, "qm_"), (2_000, 1, 1, "qm_"), (6_000, 2, 1, None)]
    assert await queues.depth("jobs") == 0
    assert age_ms(T0, clock) == 10_000 and age_ms(T0 + 20_000, clock) == 0
    with pytest.raises(MailboxActorsError):
        await reenqueue_with_attempt(queues, "jobs", job(attempt=-1), schedule)


# ---- the real-clock loop, the file ---------------------------------------------------------------


@pytest.mark.anyio
async def test_run_is_woken_by_a_send_in_the_same_process(queues: QueueService) -> None:
    """Q-1: a running consumer handles a message sent through its service at once, without
    waiting for its poll interval."""
    got = anyio.Event()

    async def handler(msg: Message) -> None:
        got.set()

    consumer = Consumer(queues, "jobs", handler, max_batch_timeout_s=0, poll_interval_s=3_600)
    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer.run)
        await anyio.wait_all_tasks_blocked()
        await queues.send("jobs", job())
        with anyio.fail_after(10):
            await got.wait()
        tg.cancel_scope.cancel()
    assert consumer.handled == 1


@pytest.mark.anyio
async def test_schema_is_migrated_once_in_wal_mode(tmp_path: Path, clock: FakeClock) -> None:
    """Q-1: the queue file is in WAL mode at the newest schema version, and opening it again (as
    another node would) keeps its messages."""
    path = tmp_path / "q.sqlite"
    async with service(path, clock) as queues:
        mid = await queues.send("jobs", job())
    async with service(path, clock, seed=1) as again:
        assert [m.id for m in await again.receive("jobs")] == [mid]
    with pytest.raises(RuntimeError):
        await again.send("jobs", job())
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


async def noop(msg: Message) -> None:
    pass


@pytest.mark.anyio
async def test_a_failed_dead_letter_move_does_not_cost_the_rest_of_the_batch(
        tmp_path: Path, sqlite_queues: QueueService, clock: FakeClock) -> None:
    """Q-1: a claim that finds an exhausted message but cannot move it to the dead letters (the
    statement fails) still hands out the rest of its batch; the exhausted one is moved later."""
    queues = sqlite_queues
    await queues.send("jobs", job(1))
    await queues.receive("jobs", max_retries=0, visibility_ms=1_000)  # delivered; lease lapses
    await queues.send("jobs", job(2))
    await clock.advance(1_000)
    other = sqlite3.connect(tmp_path / "queues.sqlite", isolation_level=None)
    other.execute("CREATE TRIGGER no_letters BEFORE UPDATE OF queue ON messages "
                  "WHEN NEW.queue = 'jobs-dlq' BEGIN SELECT RAISE(ABORT, 'refused'); END")
    got = await queues.receive("jobs", max_retries=0, visibility_ms=1_000)
    assert [m.body["n"] for m in got] == [2]
    other.execute("DROP TRIGGER no_letters")
    other.close()
    await clock.advance(1_000)
    assert await queues.receive("jobs", max_retries=0) == []  # both spent now: moved
    letters = await queues.receive("jobs-dlq", max_retries=None)
    assert sorted((m.body["n"], m.dead_letter.reason) for m in letters if m.dead_letter) == [
        (1, "visibility_timeout"), (2, "visibility_timeout")]


def test_a_body_nested_without_end_is_invalid_request() -> None:
    """Q-1: a body nested thousands deep is refused as invalid_request, not a RecursionError."""
    body: Any = 1
    for _ in range(5_000):
        body = [body]
    with pytest.raises(MailboxActorsError) as info:
        encode_body({"v": 1, "kind": "k", "x": body})
    assert info.value.code is ErrorCode.INVALID_REQUEST


@pytest.mark.anyio
@pytest.mark.parametrize("visibility_ms", [0, 30e3, True])
async def test_a_bad_visibility_timeout_is_refused_when_the_consumer_is_made(
        queues: QueueService, visibility_ms: Any) -> None:
    """Q-2: refused at construction (a running consumer would otherwise fail every poll)."""
    with pytest.raises(MailboxActorsError) as info:
        Consumer(queues, "jobs", noop, visibility_ms=visibility_ms)
    assert info.value.details == {"field": "visibility_ms"}


@pytest.mark.anyio
async def test_a_queue_whose_dead_letter_name_would_be_invalid_is_refused(
        queues: QueueService) -> None:
    """Q-1: also without a retry budget, a consumer whose derived dead-letter queue name would be
    too long is refused at once (give_up would strand its letters where nothing can read them)."""
    with pytest.raises(MailboxActorsError) as info:
        Consumer(queues, "q" * 61, noop, max_retries=None)
    assert info.value.details == {"field": "dead_letter_queue"}
