"""The loop-stall record (issue 28: a burst of due alarms must not starve requests): each piece of
work the event loop ran whole for longer than the threshold is recorded with what it was, and
nothing shorter; watching ends by putting the loop back as it was. Time comes from clocks the test
moves, never the wall clock."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import pytest

from mailbox_actors.node.loop_stalls import LoopStalls, summary

pytestmark = pytest.mark.anyio


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _holds_the_loop(clock: _Clock, cpu: _Clock, seconds: float) -> None:
    await asyncio.sleep(0)
    clock.now += seconds  # the step from here to the next await "took" this long
    cpu.now += seconds / 2
    await asyncio.sleep(0)


async def test_a_long_step_is_recorded_with_its_task_and_a_short_one_is_not(tmp_path: Path,
                                                                            ) -> None:
    """A task's step over the threshold is a stall naming its coroutine, where the step resumed
    and where it next waited, with the loop thread's CPU apart; a step under it is not one."""
    clock, cpu = _Clock(), _Clock()
    stalls = LoopStalls(0.001, clock=clock, cpu=cpu)
    with stalls.watching():
        await asyncio.create_task(_holds_the_loop(clock, cpu, 0.0005))
        await asyncio.create_task(_holds_the_loop(clock, cpu, 0.004))
    long = [s for s in stalls.stalls if s.kind == "callback"]
    assert len(long) == 1
    assert long[0].wall_ms == 4.0 and long[0].cpu_ms == 2.0
    assert long[0].what.startswith("task _holds_the_loop from __sleep0 ")
    assert "; then waits at __sleep0 " in long[0].what
    assert stalls.callbacks > 4
    stalls.write(tmp_path / "stalls.jsonl", phase="burst")
    row = json.loads((tmp_path / "stalls.jsonl").read_text().splitlines()[0])
    assert row["phase"] == "burst" and row["wall_ms"] == 4.0
    assert summary(stalls.stalls)[0][:3] == (
        "callback: task _holds_the_loop from __sleep0 tasks.py; then waits at __sleep0 tasks.py", 1, 4.0)


async def test_a_stall_says_how_long_the_loop_thread_waited_for_a_cpu() -> None:
    """A stall's wall time splits into the loop thread's CPU, its wait in the run queue for a
    CPU (``queued_ms``) and the rest, blocked: a step that ran 1 ms, waited 2 ms for a CPU and
    1 ms for the interpreter's lock is recorded with each part."""
    clock, cpu, queued = _Clock(), _Clock(), _Clock()
    stalls = LoopStalls(0.001, clock=clock, cpu=cpu, queued=queued)

    async def preempted() -> None:
        await asyncio.sleep(0)
        clock.now += 0.004
        cpu.now += 0.001
        queued.now += 0.002
        await asyncio.sleep(0)

    with stalls.watching():
        await asyncio.create_task(preempted())
    stall, = (s for s in stalls.stalls if s.kind == "callback")
    assert (stall.wall_ms, stall.cpu_ms, stall.queued_ms) == (4.0, 1.0, 2.0)


async def test_a_step_that_ends_the_watching_is_recorded_whole() -> None:
    """The step that leaves the ``watching()`` block (and may start another) is still timed
    at its end, with the run-queue wait read from the system until the block ended."""
    outer = LoopStalls(0.0)
    with outer.watching():
        await asyncio.sleep(0)
    # The step that left the block ended inside the record's timed run: no error, and the loop
    # runs its callbacks as before.
    await asyncio.sleep(0)
    assert all(s.queued_ms >= 0 for s in outer.stalls)


async def test_a_plain_callback_and_a_collector_pass_are_named(tmp_path: Path) -> None:
    """A loop callback that holds the loop is named by its function; a collector's pass inside
    it is recorded on its own (with its generation) and counted in the callback's gc time."""
    clock, cpu = _Clock(), _Clock()
    stalls = LoopStalls(0.001, clock=clock, cpu=cpu)
    done = asyncio.Event()

    def collects() -> None:
        def timed(phase: str, info: dict[str, int]) -> None:
            if phase == "stop":  # called before the record's own: the pass "took" 3 ms
                clock.now += 0.003
        gc.callbacks.insert(0, timed)
        try:
            gc.collect(1)
        finally:
            gc.callbacks.remove(timed)
        clock.now += 0.002
        done.set()

    with stalls.watching():
        asyncio.get_running_loop().call_soon(collects)
        await done.wait()
    passes = [s for s in stalls.stalls if s.kind == "gc"]
    assert [(p.wall_ms, p.what.split(" pass")[0]) for p in passes] == [(3.0, "generation 1")]
    callback, = (s for s in stalls.stalls if s.kind == "callback")
    assert callback.what.startswith("callback test_a_plain_callback_and_a_collector_pass_are_named"
                                    ".<locals>.collects")
    assert (callback.wall_ms, callback.gc_ms) == (5.0, 3.0)


async def test_watching_ends_with_the_loop_as_it_was() -> None:
    """After the block the loop runs its callbacks and polls as before, and the collector has no
    callback of the record's left."""
    loop = asyncio.get_running_loop()
    run, select = asyncio.Handle._run, loop._selector.select  # type: ignore[attr-defined]
    callbacks = list(gc.callbacks)
    with LoopStalls().watching():
        assert asyncio.Handle._run is not run
        await asyncio.sleep(0)
    assert asyncio.Handle._run is run
    assert loop._selector.select == select  # type: ignore[attr-defined]
    assert gc.callbacks == callbacks
