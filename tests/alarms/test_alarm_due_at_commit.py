"""AL-2, AL-3, EV-1, EV-2: an alarm a request's commit leaves due already runs at once, outside
the pool's turns (the scheduler's ``_run_soon``): a request's event reaches the outbox's publish
without waiting for turns that a steady request stream opens only every few rounds of the loop
(session 18: the PostgreSQL events figure's p99 was that wait).

These run a node on the real clock (``TestRuntime`` steps a fake one, which fires through
``run_due``): every wait is on an event the actors set, under a generous guard against a hang,
never a timed assertion.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.alarms import scheduler as scheduler_module
from mailbox_actors.alarms.alarm_pool import AlarmPool
from mailbox_actors.alarms.book import AlarmBook, Key
from mailbox_actors.alarms.scheduler import AlarmScheduler
from mailbox_actors.node import Node
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.runtime.actor import AlarmInfo
from mailbox_actors.runtime.settings import RuntimeSettings

GUARD_S = 60  # only against a hang: each test finishes in well under a second


@pytest.fixture(autouse=True)
def _clean() -> None:
    afs.reset_state()


async def _started(node: Node) -> Node:
    """``node``, started, once its real-time alarm loop runs (a start returns before its background
    loops had a step)."""
    await node.start()
    with anyio.fail_after(GUARD_S):
        while node.alarm_book.on_due_now is None:
            await anyio.lowlevel.checkpoint()
    return node


def _runs(oid: str) -> int:
    return sum(1 for seen in afs.ALARM_LOG if seen.object_id == oid)


@pytest.fixture
def handed_out(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Key, int]]:
    """Every key the real-time loop hands to the pool, with the runs its actor had then."""
    seen: list[tuple[Key, int]] = []
    hand_out = AlarmPool.hand_out

    def spy(self: AlarmPool, keys: list[Key]) -> None:
        seen.extend((key, _runs(key[1])) for key in keys)
        hand_out(self, keys)

    monkeypatch.setattr(AlarmPool, "hand_out", spy)
    return seen


@pytest.mark.anyio
async def test_an_alarm_a_request_makes_due_runs_without_the_pool(
        tmp_path: Path, handed_out: list[tuple[Key, int]]) -> None:
    """AL-2: a request that sets its actor's alarm for now: the alarm runs once, started from the
    commit, never handed to the pool; the actor's alarm is cleared after."""
    node = await _started(Node(RuntimeSettings(data_dir=str(tmp_path)), objects=afs.ALL_OBJECTS))
    try:
        ran = anyio.Event()
        oid = await afs.new_scratch(node, "a")

        async def hook(actor: Scratch, info: AlarmInfo) -> None:
            ran.set()

        afs.ALARM_HOOKS[oid] = hook
        await afs.scratch(node, oid, afs.SetAlarm(at_ms=SystemClock().now_ms()))
        with anyio.fail_after(GUARD_S):
            await ran.wait()
        with anyio.fail_after(GUARD_S):
            # Recorded once the run's commit is done; nothing sets an event for it.
            while node.scheduler.fired < 1:
                await anyio.lowlevel.checkpoint()
        assert _runs(oid) == 1
        assert [key for key, _ in handed_out if key[1] == oid] == []
        assert await afs.scratch(node, oid, afs.GetAlarm()) is None
    finally:
        await node.stop()


@pytest.mark.anyio
async def test_a_run_that_ends_due_again_runs_again_then_goes_back_to_the_turns(
        tmp_path: Path, handed_out: list[tuple[Key, int]]) -> None:
    """AL-3: a run started from a commit that ends with its alarm due again (events emitted while it
    ran; here a handler that sets it for now) is run again at once, ``_SOON_CHAIN`` times in a
    row; the run after those is the pool's, as any alarm's: a handler that re-arms for now at
    every run does not hold the loop outside the turns."""
    node = await _started(Node(RuntimeSettings(data_dir=str(tmp_path)), objects=afs.ALL_OBJECTS))
    clock = SystemClock()
    last = scheduler_module._SOON_CHAIN + 3
    try:
        done = anyio.Event()
        oid = await afs.new_scratch(node, "a")

        async def hook(actor: Scratch, info: AlarmInfo) -> None:
            if _runs(oid) < last:
                actor.sql.transaction_sync(lambda tx: tx.set_alarm(clock.now_ms()))
            else:
                done.set()

        afs.ALARM_HOOKS[oid] = hook
        await afs.scratch(node, oid, afs.SetAlarm(at_ms=clock.now_ms()))
        with anyio.fail_after(GUARD_S):
            await done.wait()
        ours = [runs for key, runs in handed_out if key[1] == oid]
        # The first run and _SOON_CHAIN more from the commit; the next one from the pool.
        assert ours[0] == 1 + scheduler_module._SOON_CHAIN
    finally:
        await node.stop()



class _Held:
    """A runner whose wakes never end (until cancelled)."""

    def begin_alarm(self, key: Key, retry_count: int, now_ms: int) -> None:
        return None

    async def fire_alarm(self, *args: object, **kwargs: object) -> None:
        await anyio.sleep_forever()


@pytest.mark.anyio
async def test_a_stop_right_after_a_commits_run_was_asked_leaves_its_key_to_the_book() -> None:
    """AL-3 (at least once): the real-time loop stopped right after a commit made an alarm due,
    whether or not the task of its run had a step (one cancelled before its first never reaches
    ``_fire``'s clean-up): the key is not left marked running, and its entry is in the book's
    heap, for a loop started again to fire."""
    clock = SystemClock()
    book = AlarmBook(clock.now_ms)
    sched = AlarmScheduler(book, _Held(), clock=clock, rng=SystemRng(), concurrency=4,  # type: ignore[arg-type]
                           metrics=None)
    key = ("scratch", "a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(sched._run)
        while book.on_due_now is None:
            await anyio.lowlevel.checkpoint()
        book.committed(key, clock.now_ms())  # what a request's commit tells the book
        assert key in sched._running  # its run's task is started, not yet run
        tg.cancel_scope.cancel()
    assert sched._running == set()
    assert book.next_due_ms(set()) is not None
