"""The alarm scheduler's real-time loop on the system clock (AL-3, AL-5, RT-11): its pool of
workers kept between alarms, its own wait, and a node stop that cancels a running alarm cleanly.

These run a node on the real clock (``TestRuntime`` steps a fake one, which fires through
``run_due`` instead): every wait is on an event the actors set, under a generous guard against a
hang, never a timed assertion.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.node import Node
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.runtime.actor import AlarmInfo
from mailbox_actors.runtime.settings import RuntimeSettings

GUARD_S = 60  # only against a hang: each test finishes in well under a second


@pytest.fixture(autouse=True)
def _clean() -> None:
    afs.reset_state()


def _node(data: Path, concurrency: int) -> Node:
    return Node(RuntimeSettings(data_dir=str(data), alarm_concurrency=concurrency),
                objects=afs.ALL_OBJECTS)


def _runs(oid: str) -> int:
    return sum(1 for seen in afs.ALARM_LOG if seen.object_id == oid)


@pytest.mark.anyio
async def test_more_alarms_than_workers_each_fire_once_and_a_rearm_for_now_fires_again(
        tmp_path: Path) -> None:
    """AL-3, AL-5: on the system clock, due alarms of six actors with two workers all fire, each
    once, as they come due (three before any worker is idle, three afterwards on the workers
    kept); an alarm its own handler sets for now fires again right after, not lost while its
    key was running."""
    node = _node(tmp_path, concurrency=2)
    await node.start()
    try:
        clock = SystemClock()
        first, done = anyio.Event(), anyio.Event()
        oids = [await afs.new_scratch(node, f"a{i}") for i in range(6)]
        rearm = oids[0]

        async def count(actor: Scratch, info: AlarmInfo) -> None:
            if actor.ctx.id == rearm and _runs(rearm) == 1:
                actor.sql.transaction_sync(lambda tx: tx.set_alarm(clock.now_ms()))
            if len(afs.ALARM_LOG) == 4:  # the first three, and the re-armed one
                first.set()
            if len(afs.ALARM_LOG) == 7:
                done.set()

        for oid in oids:
            afs.ALARM_HOOKS[oid] = count
        now = clock.now_ms()
        for oid in oids[:3]:
            await afs.scratch(node, oid, afs.SetAlarm(at_ms=now))
        with anyio.fail_after(GUARD_S):
            await first.wait()
        for oid in oids[3:]:  # the workers are idle now: these go to the ones kept
            await afs.scratch(node, oid, afs.SetAlarm(at_ms=clock.now_ms()))
        with anyio.fail_after(GUARD_S):
            await done.wait()
        assert [_runs(oid) for oid in oids] == [2, 1, 1, 1, 1, 1]
        assert node.scheduler.fired == 7
        for oid in oids:
            assert await afs.scratch(node, oid, afs.GetAlarm()) is None
    finally:
        await node.stop()


@pytest.mark.anyio
async def test_a_node_stop_cancels_a_running_alarm_cleanly_and_it_runs_again_after_restart(
        tmp_path: Path) -> None:
    """RT-11, AL-3: a node stopped while an alarm handler waits (and with idle workers) cancels
    that handler at its await, closes every actor file and leaves no task behind; the alarm,
    which did not finish, is still stored and fires again when the node starts again."""
    entered, other_ran, ran_again = anyio.Event(), anyio.Event(), anyio.Event()
    cancelled: list[str] = []

    async def hang(actor: Scratch, info: AlarmInfo) -> None:
        entered.set()
        try:
            await anyio.Event().wait()  # never set
        except BaseException:
            cancelled.append(actor.ctx.id)
            raise

    async def note(actor: Scratch, info: AlarmInfo) -> None:
        (other_ran if actor.ctx.id == other else ran_again).set()

    tasks_before = asyncio.all_tasks()
    node = _node(tmp_path, concurrency=4)
    await node.start()
    clock = SystemClock()
    stuck = await afs.new_scratch(node, "stuck")
    other = await afs.new_scratch(node, "other")
    afs.ALARM_HOOKS.update({stuck: hang, other: note})
    due = clock.now_ms()
    await afs.scratch(node, other, afs.SetAlarm(at_ms=due))
    await afs.scratch(node, stuck, afs.SetAlarm(at_ms=due))
    with anyio.fail_after(GUARD_S):
        await entered.wait()
        await other_ran.wait()
    await node.stop()  # (pytest's timeout guards it: a node's task group spans start to stop)
    assert cancelled == [stuck]
    assert node.host.active_count == 0
    assert {t for t in asyncio.all_tasks() if not t.done()} <= tasks_before  # no worker left

    afs.ALARM_HOOKS[stuck] = note
    restarted = _node(tmp_path, concurrency=4)
    await restarted.start()
    try:
        with anyio.fail_after(GUARD_S):
            await ran_again.wait()
        first_run, second_run = [seen for seen in afs.ALARM_LOG if seen.object_id == stuck]
        assert second_run.scheduled_ms == first_run.scheduled_ms  # the same alarm, not a new one
        assert first_run.scheduled_ms >= due
        assert await afs.scratch(restarted, stuck, afs.GetAlarm()) is None
        assert _runs(other) == 1
    finally:
        await restarted.stop()
