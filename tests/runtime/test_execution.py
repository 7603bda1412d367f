"""The execution model (RT-4): interleaving at awaits, block_concurrency_while and its reset, the
output gate; the bounded request queue (RT-10); and queued requests whose deadline passes (RPC-5).

Requests run concurrently in a task group; ``anyio.wait_all_tasks_blocked()`` waits until every
task is parked (no sleeps), and an ``anyio.Event`` holds a handler where the test wants it.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError


class Outcomes:
    """Collects what each concurrently started call returned or raised, by label."""

    def __init__(self) -> None:
        self.results: dict[str, Any] = {}
        self.order: list[str] = []

    async def call(self, label: str, coro_fn: Any, *args: Any, **kw: Any) -> None:
        try:
            self.results[label] = await coro_fn(*args, **kw)
        except MailboxActorsError as e:
            self.results[label] = e.code.value
        self.order.append(label)


def committed(path: Path, key: str) -> bool:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT 1 FROM items WHERE k = ?", (key,)).fetchone() is not None


@pytest.mark.anyio
async def test_requests_interleave_at_await_points(tmp_path: Path) -> None:
    """RT-4: while one request awaits, another request to the same actor runs to completion."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        release = anyio.Event()
        seen: list[str] = []

        async def slow(actor: Scratch, call: Call, arg: Any) -> Any:
            seen.append("slow:start")
            await release.wait()
            seen.append("slow:end")
            return actor.sql.exec("SELECT v FROM items WHERE k = 'fast'").one()[0]

        out = Outcomes()
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.call, "slow", afs.run, rt, oid, slow)
            await anyio.wait_all_tasks_blocked()
            await out.call("fast", afs.scratch, rt, oid, afs.Put(k="fast", v="ran"))
            seen.append("fast:done")
            release.set()
        assert seen == ["slow:start", "fast:done", "slow:end"]
        assert out.results == {"slow": "ran", "fast": {"k": "fast"}}


@pytest.mark.anyio
async def test_block_concurrency_while_holds_requests_and_alarms(tmp_path: Path) -> None:
    """RT-4: during block_concurrency_while no other request or alarm reaches the actor; they run,
    in arrival order, once it completes."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        other = await afs.new_scratch(rt, "other")
        release = anyio.Event()

        async def gated(actor: Scratch, call: Call, arg: Any) -> Any:
            async def critical() -> str:
                await release.wait()
                return "done"
            return await actor.ctx.block_concurrency_while(critical)

        await afs.scratch(rt, oid, afs.SetAlarm(at_ms=rt.now_ms() + 1000))
        out = Outcomes()
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.call, "gate", afs.run, rt, oid, gated)
            await anyio.wait_all_tasks_blocked()
            for i in range(3):
                tg.start_soon(out.call, f"put{i}", afs.scratch, rt, oid, afs.Put(k=f"p{i}", v="1"))
                await anyio.wait_all_tasks_blocked()
            tg.start_soon(out.call, "alarm", rt.advance, 1000)
            await anyio.wait_all_tasks_blocked()
            # An unrelated actor is not blocked.
            assert await afs.scratch(rt, other, afs.Put(k="x", v="1")) == {"k": "x"}
            assert out.order == []
            assert afs.ALARM_LOG == []
            assert not committed(rt.node.host.path_for("scratch", oid), "p0")
            release.set()
        assert out.order[:4] == ["gate", "put0", "put1", "put2"]
        assert out.results["gate"] == "done"
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["p0", "p1", "p2"]


@pytest.mark.anyio
async def test_block_concurrency_while_raising_resets_the_actor(tmp_path: Path) -> None:
    """RT-4: if block_concurrency_while's function raises, the actor is reset: its in-memory state
    is dropped, its committed storage kept, and the next request gets a fresh instance."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))

        async def remember(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.memory = arg  # type: ignore[attr-defined]
            return id(actor)

        async def recall(actor: Scratch, call: Call, arg: Any) -> Any:
            return [getattr(actor, "memory", None), id(actor)]

        first = await afs.run(rt, oid, remember, "in memory")
        assert await afs.run(rt, oid, recall) == ["in memory", first]

        async def failing(actor: Scratch, call: Call, arg: Any) -> Any:
            async def critical() -> None:
                actor.sql.transaction_sync(
                    lambda tx: tx.exec("INSERT INTO items (k, v) VALUES ('in-critical', '1')"))
                raise RuntimeError("constructor failed")
            return await actor.ctx.block_concurrency_while(critical)

        with pytest.raises(MailboxActorsError) as e:
            await afs.run(rt, oid, failing)
        assert e.value.code == "internal_error"
        assert "constructor failed" not in e.value.message

        memory, _ = await afs.run(rt, oid, recall)
        assert memory is None
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["in-critical", "kept"]


@pytest.mark.anyio
async def test_output_gate_reply_leaves_after_its_writes_commit(tmp_path: Path) -> None:
    """RT-4: writes made outside transaction_sync are not committed while the handler runs, and
    are committed by the time the reply reaches the caller (the output gate)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        path = rt.node.host.path_for("scratch", oid)
        inside: list[bool] = []

        async def write_then_reply(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.sql.exec("INSERT INTO items (k, v) VALUES ('gated', '1')")
            actor.sql.exec("UPDATE totals SET n = n + 1")
            inside.append(committed(path, "gated"))
            return "reply"

        assert await afs.run(rt, oid, write_then_reply) == "reply"
        # Read at once, before the event loop turns: the write is already durable.
        assert committed(path, "gated")
        assert inside == [False]

        # The same through the plain Put op without a transaction.
        assert await afs.scratch(rt, oid, afs.Put(k="plain", v="2", tx=False)) == {"k": "plain"}
        assert committed(path, "plain")


@pytest.mark.anyio
async def test_queue_bound_refuses_with_overloaded(tmp_path: Path) -> None:
    """RT-10: past max_queue requests waiting on an actor, requests are refused at once with
    overloaded (not retryable), counted in actor_overloaded_total; admitted ones all complete."""
    max_queue = 5
    async with TestRuntime(tmp_path, max_queue=max_queue, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        other = await afs.new_scratch(rt, "other")
        release = anyio.Event()

        async def hold(actor: Scratch, call: Call, arg: Any) -> Any:
            async def wait() -> str:
                await release.wait()
                return "held"
            return await actor.ctx.block_concurrency_while(wait)

        out = Outcomes()
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.call, "holder", afs.run, rt, oid, hold)
            await anyio.wait_all_tasks_blocked()
            for i in range(max_queue + 5):
                tg.start_soon(out.call, f"q{i}", afs.scratch, rt, oid, afs.Put(k=f"q{i}", v="1"))
                await anyio.wait_all_tasks_blocked()
            refused = [k for k, v in out.results.items() if v == "overloaded"]
            # Another actor's queue is its own.
            assert await afs.scratch(rt, other, afs.Put(k="x", v="1")) == {"k": "x"}
            with pytest.raises(MailboxActorsError) as e:
                await afs.scratch(rt, oid, afs.Get(k="q0"))
            assert e.value.code == "overloaded" and e.value.retryable is False
            release.set()
        admitted = [k for k, v in out.results.items() if v != "overloaded"]
        # The bound counts the waiting requests (and, in this runtime, possibly the one holding
        # the gate): either way no more than max_queue wait, and the rest are refused.
        assert len(admitted) in (max_queue, max_queue + 1)
        assert len(refused) == max_queue + 6 - len(admitted)
        assert all(out.results[k] in ("held", {"k": k}) for k in admitted)
        assert rt.node.metrics.get("actor_overloaded_total", (("namespace", "scratch"),)) == \
            len(refused) + 1
        # Once drained, the actor takes requests again.
        assert await afs.scratch(rt, oid, afs.Get(k="q0")) == "1"


@pytest.mark.anyio
async def test_queued_request_past_its_deadline_answers_timeout_without_running(
        tmp_path: Path) -> None:
    """RPC-5: a request still waiting in the actor's queue when its deadline passes is answered
    timeout and never runs; one whose deadline is still ahead runs."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        release = anyio.Event()

        async def hold(actor: Scratch, call: Call, arg: Any) -> Any:
            async def wait() -> None:
                await release.wait()
            await actor.ctx.block_concurrency_while(wait)

        now = rt.now_ms()
        out = Outcomes()
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.call, "holder", afs.run, rt, oid, hold)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(functools.partial(out.call, "short", afs.scratch, rt, oid,
                                            afs.Put(k="short", v="1"), deadline_ms=now + 1_000))
            tg.start_soon(functools.partial(out.call, "long", afs.scratch, rt, oid,
                                            afs.Put(k="long", v="1"), deadline_ms=now + 60_000))
            await anyio.wait_all_tasks_blocked()
            rt.clock.set_ms(now + 5_000)
            release.set()
        assert out.results["short"] == "timeout"
        assert out.results["long"] == {"k": "long"}
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["long"]


@pytest.mark.anyio
async def test_queued_request_is_answered_timeout_when_its_deadline_passes(
        tmp_path: Path) -> None:
    """RPC-5, RT-12: a request waiting behind block_concurrency_while is answered timeout as soon
    as its deadline passes on the FakeClock, while the gate is still held (as it is on the system
    clock), not only when the gate opens."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        release = anyio.Event()

        async def hold(actor: Scratch, call: Call, arg: Any) -> Any:
            async def wait() -> None:
                await release.wait()
            await actor.ctx.block_concurrency_while(wait)

        now = rt.now_ms()
        out = Outcomes()
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.call, "holder", afs.run, rt, oid, hold)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(functools.partial(out.call, "queued", afs.scratch, rt, oid,
                                            afs.Put(k="queued", v="1"), deadline_ms=now + 1_000))
            await anyio.wait_all_tasks_blocked()
            await rt.advance(1_001)
            await anyio.wait_all_tasks_blocked()
            try:
                assert out.results == {"queued": "timeout"}
            finally:
                release.set()
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == []


@pytest.mark.anyio
async def test_block_concurrency_while_excludes_requests_already_running(tmp_path: Path) -> None:
    """RT-4: a request that was already running when another closed the gate, and then asks for
    its own critical section, waits for the other's to end: never two at once."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        seen: list[str] = []
        x_go, y_release = anyio.Event(), anyio.Event()

        def critical(name: str, hold: anyio.Event | None) -> Callable[[], Awaitable[None]]:
            async def fn() -> None:
                seen.append(f"{name}:start")
                if hold is not None:
                    await hold.wait()
                seen.append(f"{name}:end")
            return fn

        async def x(actor: afs.Scratch, call: object, arg: object) -> None:  # running first
            await x_go.wait()
            await actor.ctx.block_concurrency_while(critical("X", None))

        async def y(actor: afs.Scratch, call: object, arg: object) -> None:
            await actor.ctx.block_concurrency_while(critical("Y", y_release))

        async with anyio.create_task_group() as tg:
            tg.start_soon(afs.run, rt, oid, x)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(afs.run, rt, oid, y)
            await anyio.wait_all_tasks_blocked()
            x_go.set()
            await anyio.wait_all_tasks_blocked()
            y_release.set()
        assert seen == ["Y:start", "Y:end", "X:start", "X:end"]


@pytest.mark.anyio
async def test_block_concurrency_while_nested_in_its_own_goes_straight_in(tmp_path: Path) -> None:
    """RT-4: a critical section inside the caller's own does not wait for itself."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def hook(actor: afs.Scratch, call: object, arg: object) -> str:
            async def inner() -> str:
                return "inner ran"

            async def outer() -> str:
                return await actor.ctx.block_concurrency_while(inner)

            with anyio.fail_after(5):
                return await actor.ctx.block_concurrency_while(outer)

        assert await afs.run(rt, oid, hook) == "inner ran"


def committed_rows(path: str) -> int:
    """Rows of ``items`` committed in the actor file at ``path``, read through a connection of
    its own (read-only)."""
    uri = Path(path).absolute().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        return int(conn.execute("SELECT count(*) FROM items").fetchone()[0])


@pytest.mark.anyio
async def test_write_outside_a_transaction_is_committed_before_another_actor_gets_the_call(
        tmp_path: Path) -> None:
    """RT-4: an actor that writes outside transaction_sync and then calls another actor has its
    write committed before the other actor receives the call (the output gate)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = await afs.new_scratch(rt, "a")
        b = await afs.new_scratch(rt, "b")
        path_a = rt.node.host.path_for("scratch", a)

        async def count_committed(actor: Scratch, call: Call, arg: Any) -> Any:
            return committed_rows(arg)  # runs in b: what a's file holds by now

        peek = afs.hook(count_committed)

        async def write_then_call(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.sql.exec("INSERT INTO items (k, v) VALUES ('x', '1')")  # implicit transaction
            return await actor.ctx.call("scratch", b, afs.Run(hook=peek, arg=str(path_a)),
                                        tenant_id=afs.TENANT)

        assert await afs.run(rt, a, write_then_call) == 1
        assert await afs.scratch(rt, a, afs.Get(k="x")) == "1"
