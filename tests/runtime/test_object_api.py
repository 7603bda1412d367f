"""The rest of the object API (RT-16): the async start hook, ctx.abort, async transactions, the
30 s bound on block_concurrency_while; and the loop-blocking watchdog (RT-17)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import TENANT, Scratch
from mailbox_actors.runtime import watchdog
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError

pytestmark = pytest.mark.anyio

STARTS: list[str] = []
START_GATE: dict[str, anyio.Event] = {}
START_FAILS: set[str] = set()


class Starter(Scratch):
    """Scratch with an async start hook that loads a value from storage."""

    namespace = "starter"

    async def on_start(self) -> None:
        STARTS.append(self.ctx.id)
        gate = START_GATE.get(self.ctx.id)
        if gate is not None:
            await gate.wait()
        if self.ctx.id in START_FAILS:
            START_FAILS.discard(self.ctx.id)
            raise RuntimeError("start failed once")
        rows = self.sql.exec("SELECT count(*) FROM items").one()[0]
        self.loaded = rows  # type: ignore[attr-defined]


OBJECTS = (*afs.ALL_OBJECTS, Starter)


@pytest.fixture(autouse=True)
def _clean_starts() -> None:
    STARTS.clear()
    START_GATE.clear()
    START_FAILS.clear()


async def starter(rt: TestRuntime, oid: str, req: Any) -> Any:
    return await rt.call("starter", oid, req, tenant_id=TENANT)


async def test_the_start_hook_runs_once_under_the_input_gate(tmp_path: Path) -> None:
    """RT-16: an actor's async on_start runs once per activation, before any request reaches it
    (a request arriving meanwhile waits for it, as behind the constructor's
    blockConcurrencyWhile); it runs again after the actor is evicted and reactivated; if it
    raises, that request fails and the next one starts a fresh activation."""
    async with TestRuntime(tmp_path, objects=OBJECTS, idle_ms=1_000) as rt:
        oid = rt.id_from_name("starter", "a")
        START_GATE[oid] = anyio.Event()
        results: list[Any] = []

        async def init_and_put() -> None:
            results.append(await rt.call("starter", oid, afs.Init(), tenant_id=TENANT))

        async with anyio.create_task_group() as tg:
            tg.start_soon(init_and_put)
            await anyio.wait_all_tasks_blocked()
            assert STARTS == [oid] and results == []  # the request waits for the start hook
            START_GATE.pop(oid).set()
        assert results == [{"created": True}]
        await starter(rt, oid, afs.Put(k="x", v="1"))

        async def loaded(actor: Any, call: Call, arg: Any) -> Any:
            return actor.loaded

        assert await rt.call("starter", oid, afs.Run(hook=afs.hook(loaded)),
                             tenant_id=TENANT) == 0
        assert STARTS == [oid]
        await rt.advance(2_000)  # evicted when idle
        START_FAILS.add(oid)
        with pytest.raises(MailboxActorsError) as e:
            await starter(rt, oid, afs.Dump())
        assert e.value.code == "internal_error"
        assert (await starter(rt, oid, afs.Dump()))["keys"] == ["x"]
        assert await rt.call("starter", oid, afs.Run(hook=afs.hook(loaded)),
                             tenant_id=TENANT) == 1
        assert STARTS == [oid, oid, oid]


async def test_abort_resets_the_actor_and_fails_its_requests(tmp_path: Path) -> None:
    """RT-16: ctx.abort(reason) resets the actor: the aborting request and one in flight fail
    unavailable, what was committed stays, and the next request meets a fresh instance."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))
        release = anyio.Event()
        outcomes: dict[str, Any] = {}

        async def slow(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.mark = "old instance"  # type: ignore[attr-defined]
            await release.wait()
            return "finished"

        async def aborting(actor: Scratch, call: Call, arg: Any) -> Any:
            actor.ctx.abort("the test says so")

        async def run(name: str, fn: Any) -> None:
            try:
                outcomes[name] = await afs.run(rt, oid, fn)
            except MailboxActorsError as e:
                outcomes[name] = e.code.value

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "slow", slow)
            await anyio.wait_all_tasks_blocked()
            await run("abort", aborting)
            release.set()
        assert outcomes == {"slow": "unavailable", "abort": "unavailable"}

        async def mark(actor: Scratch, call: Call, arg: Any) -> Any:
            return getattr(actor, "mark", "fresh instance")

        assert await afs.run(rt, oid, mark) == "fresh instance"
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["kept"]


async def test_an_async_transaction_holds_other_events_and_is_all_or_nothing(
        tmp_path: Path) -> None:
    """RT-16: await ctx.transaction(fn) runs an async fn as one transaction: no other request of
    the actor runs until it ends; it commits as a whole when fn returns and rolls back as a whole
    when fn raises (the exception reaches the caller, the actor is not reset)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        release = anyio.Event()
        order: list[str] = []

        async def in_tx(actor: Scratch, call: Call, arg: Any) -> Any:
            async def work(tx: Any) -> int:
                tx.exec("INSERT INTO items (k, v) VALUES ('one', '1')")
                order.append("tx paused")
                await release.wait()
                tx.exec("INSERT INTO items (k, v) VALUES ('two', '2')")
                if arg == "fail":
                    raise LookupError("undo it all")
                return 2
            actor.survivor = True  # type: ignore[attr-defined]
            try:
                return await actor.ctx.transaction(work)
            except LookupError:
                return "rolled back"

        async def other() -> None:
            await afs.scratch(rt, oid, afs.Put(k="other", v="1"))
            order.append("other request")

        async with anyio.create_task_group() as tg:
            tg.start_soon(afs.run, rt, oid, in_tx, "fail")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(other)
            await anyio.wait_all_tasks_blocked()
            assert order == ["tx paused"]  # held until the transaction ends
            release.set()
        assert order == ["tx paused", "other request"]
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["other"]  # nothing of the tx

        async def survivor(actor: Scratch, call: Call, arg: Any) -> Any:
            return getattr(actor, "survivor", False)

        assert await afs.run(rt, oid, survivor) is True  # not reset
        release = anyio.Event()
        release.set()
        assert await afs.run(rt, oid, in_tx, "commit") == 2
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["one", "other", "two"]


async def test_block_concurrency_while_gives_up_after_its_bound(tmp_path: Path) -> None:
    """RT-16: a block_concurrency_while still running after block_concurrency_timeout_ms
    (default 30 s, as workerd) is given up: its request is answered timeout, the actor is reset
    (a request queued behind it is answered unavailable), and the next request works."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS,
                           block_concurrency_timeout_ms=5_000) as rt:
        oid = await afs.new_scratch(rt, "a")
        never = anyio.Event()
        outcomes: dict[str, Any] = {}

        async def stuck(actor: Scratch, call: Call, arg: Any) -> Any:
            async def forever() -> None:
                await never.wait()
            await actor.ctx.block_concurrency_while(forever)

        async def run(name: str, fn: Any, deadline: int) -> None:
            try:
                outcomes[name] = await afs.run(rt, oid, fn, deadline_ms=rt.now_ms() + deadline)
            except MailboxActorsError as e:
                outcomes[name] = (e.code.value, e.details)

        async def quick(actor: Scratch, call: Call, arg: Any) -> Any:
            return "ran"

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "stuck", stuck, 60_000)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(run, "queued", quick, 60_000)
            await anyio.wait_all_tasks_blocked()
            await rt.advance(4_999)
            assert outcomes == {}
            await rt.advance(1)
        assert outcomes["stuck"] == ("timeout", {"block_concurrency_timeout_ms": 5_000})
        assert outcomes["queued"][0] == "unavailable"
        assert await afs.run(rt, oid, quick) == "ran"


async def test_a_handler_that_holds_the_loop_is_logged_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """RT-17: a handler step that computes without yielding for longer than loop_block_warn_ms
    is logged (event_loop_blocked, with namespace, op and duration) and counted in /metrics
    (actor_loop_blocked_total by namespace and op); one that yields between short steps is not.
    The watchdog's timer is moved by the steps alone (a loaded machine's preemption of a short
    step would otherwise be reported)."""
    timer = [0.0]
    monkeypatch.setattr(watchdog, "_now", lambda: timer[0])
    caplog.set_level(logging.WARNING, logger="mailbox_actors")
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, loop_block_warn_ms=100) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def spin(actor: Scratch, call: Call, arg: Any) -> Any:
            steps = arg["steps"]
            for _ in range(steps):
                timer[0] += arg["ms"] / 1000  # the step holds the loop this long, no await
                if steps > 1:
                    await anyio.lowlevel.checkpoint()

        await afs.run(rt, oid, spin, {"steps": 40, "ms": 2})  # yields every 2 ms: fine
        assert not [r for r in caplog.records if "event_loop_blocked" in r.getMessage()]
        await afs.run(rt, oid, spin, {"steps": 1, "ms": 250})
        lines = [json.loads(r.getMessage()) for r in caplog.records
                 if "event_loop_blocked" in r.getMessage()]
        assert len(lines) == 1
        assert (lines[0]["namespace"], lines[0]["op"]) == ("scratch", "run")
        assert lines[0]["duration_ms"] >= 250 and lines[0]["threshold_ms"] == 100
        metrics = rt.node.metrics.render_prometheus()
        assert 'actor_loop_blocked_total{namespace="scratch",op="run"} 1' in metrics
