"""Alarms on the FakeClock: one alarm per actor in its own file (AL-1), purposes multiplexed onto it
(AL-2), at-least-once delivery with backoff and the handler's view (AL-3), and firing exactly at the
due time, in time order (AL-5)."""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog

import actors_for_tests as afs
from actors_for_tests import DAY_MS, Scratch
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import AlarmInfo, Call
from mailbox_actors.testing import TestRuntime

SCRATCH = (("namespace", "scratch"),)


def alarm_in_file(path: Path) -> list[tuple[int]]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT at_ms FROM _ma_alarm").fetchall()


# ---- AL-1 ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_one_alarm_per_actor_set_get_delete(tmp_path: Path) -> None:
    """AL-1: set_alarm replaces the actor's one alarm, get_alarm reads it, delete_alarm removes
    it; it is stored in the actor's own file and survives a restart."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a")
        path = rt.node.host.path_for("scratch", oid)
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None
        assert await afs.scratch(rt, oid, afs.SetAlarm(at_ms=t0 + 5_000)) == t0 + 5_000
        assert await afs.scratch(rt, oid, afs.SetAlarm(at_ms=t0 + 9_000)) == t0 + 9_000
        assert alarm_in_file(path) == [(t0 + 9_000,)]
        assert await afs.scratch(rt, oid, afs.SetAlarm(at_ms=None)) is None
        assert alarm_in_file(path) == []
        await rt.advance(10_000)
        assert afs.ALARM_LOG == []  # neither the replaced nor the deleted alarm fires
        await afs.scratch(rt, oid, afs.SetAlarm(at_ms=t0 + 20_000))
    async with TestRuntime(tmp_path, start_ms=t0 + 10_000, objects=afs.ALL_OBJECTS) as rt:
        assert await afs.scratch(rt, oid, afs.GetAlarm()) == t0 + 20_000
        await rt.advance(10_000)
        assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(oid, t0 + 20_000)]
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None


@pytest.mark.anyio
async def test_alarm_commits_with_the_state_change_that_set_it(tmp_path: Path) -> None:
    """AL-1: an alarm set in a transaction that rolls back is not set, and never fires."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def set_then_fail(actor: Scratch, call: Call, arg: Any) -> Any:
            def fn(tx: Any) -> None:
                tx.exec("INSERT INTO items (k, v) VALUES ('x', '1')")
                tx.set_alarm(rt.now_ms() + 1_000)
                raise RuntimeError("abort")
            with pytest.raises(RuntimeError):
                actor.sql.transaction_sync(fn)
            return actor.sql.get_alarm()

        assert await afs.run(rt, oid, set_then_fail) is None
        await rt.advance(60_000)
        assert afs.ALARM_LOG == []
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == []


# ---- AL-5: exactly on time, in order -------------------------------------------------------------


@pytest.mark.anyio
async def test_advance_fires_alarms_at_their_time_in_order(tmp_path: Path) -> None:
    """AL-5, RT-12: advancing the FakeClock fires each due alarm with the clock at its due time
    (zero lateness), in time order across actors, and none before its time."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        offsets = {"c": 3_000, "a": 1_000, "d": 1_000, "b": 2_500, "e": 90_000}
        ids = {n: await afs.new_scratch(rt, n, alarm_at=t0 + off) for n, off in offsets.items()}
        await rt.advance(999)
        assert afs.ALARM_LOG == []
        await rt.advance(10_000)
        fired = [(s.object_id, s.now_ms, s.scheduled_ms) for s in afs.ALARM_LOG]
        assert sorted(fired[:2]) == sorted([(ids["a"], t0 + 1_000, t0 + 1_000),
                                            (ids["d"], t0 + 1_000, t0 + 1_000)])
        assert fired[2:] == [(ids["b"], t0 + 2_500, t0 + 2_500), (ids["c"], t0 + 3_000, t0 + 3_000)]
        assert rt.now_ms() == t0 + 10_999
        await rt.advance(100_000)
        assert afs.ALARM_LOG[-1].object_id == ids["e"] and afs.ALARM_LOG[-1].now_ms == t0 + 90_000
        assert len(afs.ALARM_LOG) == 5
        assert rt.node.metrics.get("alarms_fired_total", SCRATCH) == 5


@pytest.mark.anyio
async def test_fire_alarm_now_and_alarm_set_in_the_past(tmp_path: Path) -> None:
    """AL-1, AL-5: an alarm set for now or the past fires at run_until_idle without moving time;
    fire_alarm_now runs a future alarm at once (runDurableObjectAlarm)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        past = await afs.new_scratch(rt, "past", alarm_at=t0 - 5_000)
        future = await afs.new_scratch(rt, "future", alarm_at=t0 + 3_600_000)
        await rt.run_until_idle()
        assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(past, t0)]
        assert await rt.fire_alarm_now("scratch", future) is True
        assert [s.object_id for s in afs.ALARM_LOG] == [past, future]
        assert await afs.scratch(rt, future, afs.GetAlarm()) is None
        assert await rt.fire_alarm_now("scratch", future) is False  # nothing left to fire
        assert rt.now_ms() == t0


# ---- AL-2 ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_purposes_are_multiplexed_onto_the_one_alarm(tmp_path: Path) -> None:
    """AL-2: schedule(purpose, at) records alarm:{purpose} and lowers the alarm to it when
    earlier; the handler runs every due purpose, earliest first, then re-arms the alarm to the
    earliest purpose still pending."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = rt.id_from_name("purposes", "p")

        async def call(req: Any) -> Any:
            return await rt.call("purposes", oid, req, tenant_id=afs.TENANT)

        await call(afs.PInit())
        s = await call(afs.Schedule(purpose="maintenance", at_ms=t0 + DAY_MS))
        assert s == {"alarm": t0 + DAY_MS, "scheduled": {"maintenance": t0 + DAY_MS}}
        s = await call(afs.Schedule(purpose="check", at_ms=t0 + 5_000))
        assert s["alarm"] == t0 + 5_000
        s = await call(afs.Schedule(purpose="outbox", at_ms=t0 + 5_000))
        assert s["alarm"] == t0 + 5_000
        # A later time for an existing purpose moves that purpose; it never raises the alarm
        # past an earlier pending one.
        s = await call(afs.Schedule(purpose="check", at_ms=t0 + 60_000))
        assert s["alarm"] == t0 + 5_000
        assert s["scheduled"] == {"maintenance": t0 + DAY_MS, "check": t0 + 60_000,
                                  "outbox": t0 + 5_000}

        await rt.advance(5_000)
        assert afs.PURPOSE_LOG == [(oid, "outbox", t0 + 5_000)]
        s = await call(afs.PState())
        assert s == {"alarm": t0 + 60_000,
                     "scheduled": {"maintenance": t0 + DAY_MS, "check": t0 + 60_000}}

        await call(afs.Schedule(purpose="outbox", at_ms=t0 + 60_000))
        await rt.advance(55_000)
        assert afs.PURPOSE_LOG[1:] == [(oid, "check", t0 + 60_000), (oid, "outbox", t0 + 60_000)]
        assert await call(afs.PState()) == {"alarm": t0 + DAY_MS,
                                            "scheduled": {"maintenance": t0 + DAY_MS}}

        # A recurring purpose re-schedules itself each run.
        await rt.advance(3 * DAY_MS)
        assert [e for e in afs.PURPOSE_LOG if e[1] == "maintenance"] == [
            (oid, "maintenance", t0 + n * DAY_MS) for n in (1, 2, 3)]
        assert (await call(afs.PState()))["alarm"] == t0 + 4 * DAY_MS


@pytest.mark.anyio
async def test_failing_purpose_stays_pending_and_is_retried(tmp_path: Path) -> None:
    """AL-2, AL-3: when a purpose's method raises, it and the purposes after it stay pending and
    run on the retry; purposes that completed are not run again."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = rt.id_from_name("purposes", "p")
        await rt.call("purposes", oid, afs.PInit(), tenant_id=afs.TENANT)
        await rt.call("purposes", oid, afs.Schedule(purpose="outbox", at_ms=t0 + 1_000),
                      tenant_id=afs.TENANT)
        await rt.call("purposes", oid, afs.Schedule(purpose="check", at_ms=t0 + 1_000),
                      tenant_id=afs.TENANT)
        afs.FAIL_PURPOSE_ONCE.add("outbox")  # "check" sorts first and runs; then outbox fails
        await rt.advance(1_000)
        assert afs.PURPOSE_LOG == [(oid, "check", t0 + 1_000)]
        state = await rt.call("purposes", oid, afs.PState(), tenant_id=afs.TENANT)
        assert "outbox" in state["scheduled"] and "check" not in state["scheduled"]
        await rt.advance(3_000)  # first retry is 2 s (+ up to 25 %) later
        assert [p for _, p, _ in afs.PURPOSE_LOG] == ["check", "outbox"]
        assert 2_000 <= afs.PURPOSE_LOG[1][2] - (t0 + 1_000) <= 2_500
        state = await rt.call("purposes", oid, afs.PState(), tenant_id=afs.TENANT)
        assert state == {"alarm": None, "scheduled": {}}


# ---- AL-3 ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_failing_handler_retries_with_backoff_then_is_abandoned(tmp_path: Path) -> None:
    """AL-3: a handler that raises is retried at 2, 4, 8, 16, 32, 64 s (plus at most 25% jitter)
    of FakeClock time, sees retry_count and is_retry, and is abandoned after 6 retries."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "failing", alarm_at=t0 + 1_000)
        healthy = await afs.new_scratch(rt, "healthy", alarm_at=t0 + 30_000)

        subject = "Quarterly secret plans"

        async def boom(actor: Scratch, info: AlarmInfo) -> None:
            raise RuntimeError(f"handler failed on {subject!r}")

        afs.ALARM_HOOKS[oid] = boom
        with structlog.testing.capture_logs() as logs:
            await rt.advance(1_000 + 200_000)
        abandoned = [e for e in logs if e["event"] == "alarm_abandoned"]
        assert len(abandoned) == 1 and abandoned[0]["object_id"] == oid
        assert abandoned[0]["log_level"] == "error"
        # Each failure is logged by its type and place, never its text (it may quote content).
        failed = [e for e in logs if e["event"] == "alarm_handler_failed"]
        assert len(failed) == 7 and {e["error"] for e in failed} == {"RuntimeError"}
        assert failed[0]["at"].startswith("test_alarms.py:") and "secret" not in str(logs)
        runs = [s for s in afs.ALARM_LOG if s.object_id == oid]
        assert [s.retry_count for s in runs] == [0, 1, 2, 3, 4, 5, 6]
        assert [s.is_retry for s in runs] == [False] + [True] * 6
        assert runs[0].now_ms == t0 + 1_000
        gaps = [b.now_ms - a.now_ms for a, b in itertools.pairwise(runs)]
        for n, gap in enumerate(gaps, start=1):
            base = 2_000 * 2 ** (n - 1)
            assert base <= gap <= base * 1.25, (n, gap)
        assert all(s.scheduled_ms == t0 + 1_000 for s in runs)
        m = rt.node.metrics
        assert m.get("alarm_retries_total", SCRATCH) == 6
        assert m.get("alarms_abandoned_total", SCRATCH) == 1
        # Abandoned: the alarm is cleared and never fires again.
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None
        await rt.advance(7 * DAY_MS)
        assert len([s for s in afs.ALARM_LOG if s.object_id == oid]) == 7
        # The other actor's alarm was not held up by the failures.
        assert [s.now_ms for s in afs.ALARM_LOG if s.object_id == healthy] == [t0 + 30_000]


@pytest.mark.anyio
async def test_handler_that_recovers_on_retry_stops_retrying(tmp_path: Path) -> None:
    """AL-3: delivery is at least once: a handler that fails twice then succeeds runs three times
    and its alarm is then cleared; the next alarm starts again at retry_count 0."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 1_000)

        async def flaky(actor: Scratch, info: AlarmInfo) -> None:
            if info.retry_count < 2:
                raise RuntimeError("not yet")

        afs.ALARM_HOOKS[oid] = flaky
        await rt.advance(60_000)
        assert [s.retry_count for s in afs.ALARM_LOG] == [0, 1, 2]
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None
        assert [r[2] for r in await afs.scratch(rt, oid, afs.Fired())] == [0, 1, 2]
        await afs.scratch(rt, oid, afs.SetAlarm(at_ms=rt.now_ms() + 1_000))
        await rt.advance(1_000)
        assert afs.ALARM_LOG[-1].retry_count == 0 and not afs.ALARM_LOG[-1].is_retry


@pytest.mark.anyio
async def test_get_alarm_is_none_during_handler_and_set_alarm_inside_stands(
        tmp_path: Path) -> None:
    """AL-3: during the alarm handler get_alarm() returns None; an alarm set inside the handler
    stands (it is not cleared when the handler completes) and fires at its time."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 1_000)

        async def rearm(actor: Scratch, info: AlarmInfo) -> None:
            if info.scheduled_ms == t0 + 1_000:
                actor.sql.transaction_sync(lambda tx: tx.set_alarm(t0 + 50_000))

        afs.ALARM_HOOKS[oid] = rearm
        await rt.advance(1_000)
        assert afs.ALARM_LOG[0].get_alarm_during is None
        assert await afs.scratch(rt, oid, afs.GetAlarm()) == t0 + 50_000
        await rt.advance(49_000)
        assert [(s.scheduled_ms, s.now_ms) for s in afs.ALARM_LOG] == [
            (t0 + 1_000, t0 + 1_000), (t0 + 50_000, t0 + 50_000)]
        assert afs.ALARM_LOG[1].get_alarm_during is None
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None


@pytest.mark.anyio
async def test_set_alarm_inside_a_failing_handler_stands(tmp_path: Path) -> None:
    """AL-3: an alarm committed by a handler that then raises is kept: it replaces the retry."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 1_000)

        async def rearm_then_fail(actor: Scratch, info: AlarmInfo) -> None:
            if info.scheduled_ms == t0 + 1_000:
                actor.sql.transaction_sync(lambda tx: tx.set_alarm(t0 + 600_000))
                raise RuntimeError("after re-arming")

        afs.ALARM_HOOKS[oid] = rearm_then_fail
        await rt.advance(1_000)
        assert await afs.scratch(rt, oid, afs.GetAlarm()) == t0 + 600_000
        await rt.advance(599_000)
        assert afs.ALARM_LOG[-1].scheduled_ms == t0 + 600_000
        assert afs.ALARM_LOG[-1].now_ms == t0 + 600_000


@pytest.mark.anyio
async def test_only_one_alarm_handler_runs_at_a_time(tmp_path: Path) -> None:
    """AL-3: while an actor's alarm handler runs, another fire of its alarm does not start a
    second handler."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 1_000)
        release = anyio.Event()
        running: list[int] = []

        async def slow(actor: Scratch, info: AlarmInfo) -> None:
            running.append(1)
            assert len(running) == 1
            await release.wait()
            running.pop()

        afs.ALARM_HOOKS[oid] = slow
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.advance, 1_000)
            await anyio.wait_all_tasks_blocked()
            assert running == [1]
            assert await rt.fire_alarm_now("scratch", oid) is False
            release.set()
        assert len(afs.ALARM_LOG) == 1
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None


@pytest.mark.anyio
@pytest.mark.parametrize("change", ["set", "delete"])
async def test_alarm_change_in_rolled_back_nested_transaction_is_undone(
        tmp_path: Path, change: str) -> None:
    """AL-1, RT-5: an alarm set or deleted inside a nested transaction_sync that raises is rolled
    back with it, though the outer transaction commits: get_alarm, the file and the firing all
    agree on the alarm as it was."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 60_000)
        path = rt.node.host.path_for("scratch", oid)

        async def nested(actor: Scratch, call: Call, arg: Any) -> Any:
            def inner(tx: Any) -> None:
                if change == "set":
                    tx.set_alarm(t0 + 1_000)
                else:
                    tx.delete_alarm()
                raise RuntimeError("undo the inner part")

            def outer(tx: Any) -> None:
                tx.exec("INSERT INTO items (k, v) VALUES ('outer', '1')")
                with pytest.raises(RuntimeError):
                    tx.transaction_sync(inner)

            actor.sql.transaction_sync(outer)
            return actor.sql.get_alarm()

        assert await afs.run(rt, oid, nested) == t0 + 60_000
        assert alarm_in_file(path) == [(t0 + 60_000,)]
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["outer"]
        await rt.advance(59_999)
        assert afs.ALARM_LOG == []
        await rt.advance(1)
        assert [(s.scheduled_ms, s.now_ms) for s in afs.ALARM_LOG] == [(t0 + 60_000, t0 + 60_000)]


HOUR = 3_600_000


T0 = 1_800_000_000_000


@pytest.mark.anyio
async def test_failed_purpose_is_retried_within_backoff_after_another_rescheduled_a_day_later(
        tmp_path: Path) -> None:
    """AL-3: when one purpose fails after another re-scheduled itself a day later, the failed one
    is retried after the first backoff (2 s plus at most 25%), not a day later."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = rt.id_from_name("purposes", "p")
        await rt.call("purposes", oid, afs.PInit(), tenant_id=afs.TENANT)
        t = rt.now_ms() + 1_000
        for purpose in ("maintenance", "outbox"):
            await rt.call("purposes", oid, afs.Schedule(purpose=purpose, at_ms=t),
                          tenant_id=afs.TENANT)
        afs.FAIL_PURPOSE_ONCE.add("outbox")

        await rt.advance(1_000)
        assert afs.PURPOSE_LOG == [(oid, "maintenance", t)]
        state = await rt.call("purposes", oid, afs.PState(), tenant_id=afs.TENANT)
        assert state["scheduled"] == {"maintenance": t + afs.DAY_MS, "outbox": t}

        await rt.advance(2_500)
        assert [p for _, p, _ in afs.PURPOSE_LOG] == ["maintenance", "outbox"]
        assert 2_000 <= afs.PURPOSE_LOG[1][2] - t <= 2_500
        state = await rt.call("purposes", oid, afs.PState(), tenant_id=afs.TENANT)
        assert state == {"alarm": t + afs.DAY_MS, "scheduled": {"maintenance": t + afs.DAY_MS}}


@pytest.mark.anyio
async def test_moving_one_alarm_many_times_keeps_the_heap_bounded(tmp_path: Path) -> None:
    """AL-5: moving one alarm thousands of times keeps the scheduler's heap within a small multiple
    of the pending alarms plus 1024 entries, and the alarm still fires once, at its last time."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        sched = rt.node.scheduler
        assert sched is not None
        oid = await afs.new_scratch(rt, "moved")
        largest = 0
        at = 0
        for i in range(3_000):  # e.g. an inactivity timer pushed back on every request
            at = rt.now_ms() + HOUR - i
            await afs.scratch(rt, oid, afs.SetAlarm(at_ms=at))
            largest = max(largest, sched.book.heap_size)
            assert sched.book.heap_size <= 4 * sched.pending_count + 1024
        assert sched.pending_count == 1 and largest > 1_000  # the moves did pile up, then shrank
        await rt.advance(HOUR)
        assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(oid, at)]


@pytest.mark.anyio
async def test_an_alarm_moved_in_a_rolled_back_transaction_is_not_kept_firing(
        tmp_path: Path) -> None:
    """AL-3: an alarm handler whose transaction moves the alarm and then fails leaves the alarm
    as it was: done after this run, not kept (which fired it again at once, without end)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 1_000)

        async def hook(actor: afs.Scratch, info: object) -> None:
            def fn(tx: SqlStorage) -> None:
                tx.set_alarm(tx.now_ms() + 3_600_000)
                raise ValueError("validation failed")
            if len(afs.ALARM_LOG) > 5:
                return  # bounds the test should the alarm be kept firing
            with contextlib.suppress(ValueError):
                actor.sql.transaction_sync(fn)

        afs.ALARM_HOOKS[oid] = hook
        await rt.advance(1_000)
        assert len(afs.ALARM_LOG) == 1
        assert await afs.scratch(rt, oid, afs.GetAlarm()) is None


@pytest.mark.anyio
async def test_a_call_made_from_an_alarm_handler_carries_the_alarms_request_id(
        tmp_path: Path) -> None:
    """AL-7, RT-12: an alarm run has one req_ id; every actor call its handler makes carries it in
    the callee's envelope (the same id its log lines carry), and each run gets a fresh one."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        callee = await afs.new_scratch(rt, "callee")
        seen: list[str] = []

        async def echo(actor: afs.Scratch, call: Call, arg: Any) -> Any:
            seen.append(call.request_id)
            return call.request_id

        echo_name = afs.hook(echo)
        answers: list[str] = []

        async def call_out(actor: afs.Scratch, info: AlarmInfo) -> None:
            answers.append(await actor.ctx.call("scratch", callee, afs.Run(hook=echo_name),
                                                tenant_id=afs.TENANT))
            answers.append(await actor.ctx.call("scratch", callee, afs.Run(hook=echo_name),
                                                tenant_id=afs.TENANT))

        caller = await afs.new_scratch(rt, "caller", alarm_at=rt.now_ms() + 1_000)
        afs.ALARM_HOOKS[caller] = call_out
        await rt.advance(1_000)
        await afs.scratch(rt, caller, afs.SetAlarm(at_ms=rt.now_ms() + 1_000))
        await rt.advance(1_000)
        runs = [s.request_id for s in afs.ALARM_LOG if s.object_id == caller]
        assert len(runs) == 2 and all(r.startswith("req_") for r in runs) and runs[0] != runs[1]
        assert seen == answers == [runs[0], runs[0], runs[1], runs[1]]
