"""RT-16 with other tasks under way: an actor's ``ctx.transaction`` holds its input gate, so no
new request or alarm is delivered while it is open; but a request (or an alarm run) already
under way when it began goes on at its next step. A write of such a task must never become a
part of the open transaction: answered as stored, it would be undone by that transaction's
rollback (review s23 R7, R5). It is refused instead (``unavailable``, retryable, nothing of it
stored); an alarm run refused so runs again.
Real SQLite files, the full RPC path; the order of steps is fixed by events, not by time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import actors_for_tests as afs
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.outbox import EventSink
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.events import Event

pytestmark = pytest.mark.anyio

# Each statement a request under way makes, and the keys its retry leaves in ``items``.
STATEMENTS: dict[str, tuple[Callable[[Any], Any], list[str]]] = {
    "transaction_sync": (lambda actor: actor.sql.transaction_sync(
        lambda tx: tx.exec("INSERT INTO items (k, v) VALUES ('a', '1')")), ["a"]),
    "implicit": (lambda actor: actor.sql.exec("INSERT INTO items (k, v) VALUES ('a', '1')"),
                 ["a"]),
    "set_alarm": (lambda actor: actor.sql.set_alarm(actor.sql.now_ms() + 60_000), []),
    # A read would answer with what the transaction has not committed (review s23 R9).
    "select": (lambda actor: actor.sql.exec("SELECT k FROM items").all(), []),
    "kv_get": (lambda actor: actor.ctx.storage.kv.get("b"), []),
    "kv_put": (lambda actor: actor.ctx.storage.kv.put("a", 1), []),
}


async def _settled() -> None:
    for _ in range(50):  # let every task that can run, run (no clock: steps, not time)
        await anyio.lowlevel.checkpoint()


@pytest.mark.parametrize("statement", sorted(STATEMENTS))
async def test_a_request_under_way_cannot_use_anothers_transaction(
        tmp_path: Any, statement: str) -> None:
    """Request A waits; request B opens ctx.transaction, writes 'b' and waits; A resumes and
    writes or reads: refused with ``unavailable`` (retryable), neither a savepoint of B's nor a
    read of what B has not committed. B rolls back; A's retry then runs, and 'b' is gone as
    B's rollback says."""
    release_a, a_waiting, b_in, release_b = (anyio.Event(), anyio.Event(), anyio.Event(),
                                             anyio.Event())
    answers: dict[str, Any] = {}
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def a(actor: Any, _call: Any, _arg: Any) -> Any:
            a_waiting.set()
            await release_a.wait()
            STATEMENTS[statement][0](actor)
            return "a stored"

        async def b(actor: Any, _call: Any, _arg: Any) -> Any:
            return await afs.doomed_transaction(actor, lambda tx: tx.exec(
                "INSERT INTO items (k, v) VALUES ('b', '1')"), b_in, release_b)

        async def call(name: str, fn: Any) -> None:
            try:
                answers[name] = await afs.run(rt, oid, fn)
            except MailboxActorsError as e:
                answers[name] = (e.code.value, e.retryable)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "a", a)
            with anyio.fail_after(10):  # a bound on a hang, not a timing
                await a_waiting.wait()
            tg.start_soon(call, "b", b)
            with anyio.fail_after(10):
                await b_in.wait()
            release_a.set()
            await _settled()
            assert answers == {"a": ("unavailable", True)}  # answered before B ended, refused
            release_b.set()
        assert answers["b"] == "rolled back"
        dump = await afs.scratch(rt, oid, afs.Dump())
        assert dump["keys"] == []  # nothing of A's refused write, nothing of B's
        release_a = anyio.Event()
        release_a.set()
        assert await afs.run(rt, oid, a) == "a stored"  # the retry
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == STATEMENTS[statement][1]


async def test_a_task_started_inside_the_transaction_writes_into_it(tmp_path: Any) -> None:
    """A task the transaction's own code starts is part of it (it inherits the transaction's
    context): its writes join it and are undone with it."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def b(actor: Any, _call: Any, _arg: Any) -> Any:
            async def child() -> None:
                await anyio.lowlevel.checkpoint()
                actor.sql.exec("INSERT INTO items (k, v) VALUES ('child', '1')")

            async def work(tx: Any) -> None:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(child)
                assert tx.exec("SELECT k FROM items").all()[0]["k"] == "child"
                raise LookupError("undo")
            try:
                await actor.ctx.transaction(work)
            except LookupError:
                return "rolled back"
            return "committed"

        assert await afs.run(rt, oid, b) == "rolled back"
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == []


@pytest.mark.parametrize("emits", [False, True], ids=["writes", "emits"])
async def test_an_alarm_runs_closing_commit_is_refused_under_an_open_transaction(
        tmp_path: Any, emits: bool) -> None:
    """AL-3, EV-2, EV-3, review s23 R5: an outbox run awaiting its publish while a request opens
    ctx.transaction, which then rolls back. The run's closing commit (the events marked, the
    purpose cleared, the alarm re-armed) is refused rather than joined to it (its rollback would
    undo them after the run was settled, and the event would wait a day for the daily prune's
    alarm): the run fails and runs again, publishing the event a second time (at least once),
    and marks it. An event the transaction emits is never published by the run meanwhile
    (review s23 R4): it was not committed, and rolled back."""
    started, release, tx_in, tx_go = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()
    published: list[int] = []

    class Held:
        def __init__(self, inner: EventSink) -> None:
            self.inner = inner

        async def publish(self, ns: str, oid: str, events: Sequence[Event]) -> None:
            published.extend(e.sequence for e in events)
            if not release.is_set():
                started.set()
                await release.wait()
            await self.inner.publish(ns, oid, events)

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, wrap_event_sink=Held) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def outbox_too(actor: Any, info: Any) -> None:
            await Actor.alarm(actor, info)
        afs.ALARM_HOOKS[oid] = outbox_too

        async def emit_one(actor: Any, _call: Any, arg: Any) -> Any:
            return actor.sql.transaction_sync(
                lambda tx: actor.ctx.emit(tx, "scratch.x", {"n": arg})).id

        async def doomed(actor: Any, _call: Any, _arg: Any) -> Any:
            def write(tx: Any) -> None:
                if emits:
                    actor.ctx.emit(tx, "scratch.doomed", {"n": 99})
                else:
                    tx.exec("INSERT INTO items (k, v) VALUES ('doomed', '1')")
            return await afs.doomed_transaction(actor, write, tx_in, tx_go)

        first_id = await afs.run(rt, oid, emit_one, 1)
        result: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run_until_idle)  # the outbox run, held in its first publish

            async def request() -> None:
                result.append(await afs.run(rt, oid, doomed))
            with anyio.fail_after(10):
                await started.wait()
            tg.start_soon(request)
            with anyio.fail_after(10):
                await tx_in.wait()
            release.set()  # the publish returns while the transaction is open
            await _settled()
            tx_go.set()
        await rt.run_until_idle()
        assert result == ["rolled back"]
        assert published == [1]
        await rt.advance(60_000)  # past the failed run's retry
        await rt.run_until_idle()
        assert published == [1, 1]  # published again by the retry: at least once (EV-3)

        async def state(actor: Any, _call: Any, _arg: Any) -> Any:
            return (actor.sql.exec("SELECT count(*) AS n FROM outbox "
                                   "WHERE dispatched_at IS NULL").one()["n"],
                    actor.ctx.scheduled())
        undispatched, purposes = await afs.run(rt, oid, state)
        assert undispatched == 0  # marked by the retry's closing commit
        assert "outbox" not in purposes
        second_id = await afs.run(rt, oid, emit_one, 2)  # out at once, not a day later
        await rt.run_until_idle()
        assert published == [1, 1, 2]
        # Nothing of the rolled-back transaction, and each sequence one event.
        assert {(e.sequence, e.id, e.type) for e in rt.events.events()} == \
            {(1, first_id, "scratch.x"), (2, second_id, "scratch.x")}
