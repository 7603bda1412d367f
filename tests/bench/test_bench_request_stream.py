"""The outside caller of ``request_p99_during_alarm_burst_ms`` (``bench.request_stream``): a process
of its own whose requests are timed from their sending, into the phase current at each answer;
and the figure's phases (``bench.ticker_figures``): the burst alarms_fired_per_s measures, then
idle and burst windows of as many requests each, interleaved.

Nothing here asserts a speed: the stream runs until each phase has its requests (an event, not a
timer), and what is checked is where they went, what ran meanwhile, and that the caller process
ends with the stream.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import anyio
import msgspec
import pytest

from mailbox_actors.bench import ticker_figures
from mailbox_actors.bench.actors import BenchTicker, TickInit, ticker_name
from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.bench.request_stream import (
    LOOP_ENV,
    Window,
    on_loop,
    request_stream,
    served_loop_name,
)
from mailbox_actors.http.server import loop_backend_options
from mailbox_actors.node import Node
from mailbox_actors.runtime.settings import RuntimeSettings

GUARD_S = 60  # only against a hang
PER_PHASE = 20
TENANT = "t_bench"


@pytest.mark.anyio
async def test_an_outside_caller_fills_each_phase_and_ends_with_the_stream(tmp_path: Path) -> None:
    """Issue 28's request stream: the caller's reads of ticker 0 answer, each timed (a positive
    number of milliseconds) into the phase that was last when it was answered; once the stream
    is stopped no request is counted any more and the caller's process has exited."""
    await _two_phases(tmp_path)


@pytest.mark.anyio
async def test_the_stream_runs_on_the_loop_serve_runs_a_node_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28's figure is measured where users run a node (ADR 0023): ``on_loop`` runs the
    measurement on the loop ``serve`` uses (uvloop where importable), in a thread of its own,
    and the stream and its caller process work there as on asyncio's loop; ``bench
    --stream-loop asyncio`` keeps it on asyncio's."""
    monkeypatch.delenv(LOOP_ENV, raising=False)
    loop = served_loop_name()
    assert loop == ("uvloop" if loop_backend_options() else "asyncio")
    assert await on_loop(loop, _two_phases, tmp_path) == loop
    monkeypatch.setenv(LOOP_ENV, "asyncio")  # bench --stream-loop asyncio
    assert served_loop_name() == "asyncio"


async def _two_phases(tmp_path: Path) -> str:
    """A node with ticker 0 and the stream into two phases, checked; the running loop's kind."""
    node = Node(RuntimeSettings(data_dir=str(tmp_path)), objects=(BenchTicker,))
    await node.start()
    try:
        oid = node.id_from_name(BenchTicker.namespace, ticker_name(0))
        await node.call(BenchTicker.namespace, oid, TickInit(alarm_at_ms=2**50), tenant_id=TENANT)
        children_before = set(_children())
        first, second = Window(PER_PHASE), Window(PER_PHASE)
        phases: list[list[float]] = [first]
        stop = anyio.Event()
        with anyio.fail_after(GUARD_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(request_stream, node, TENANT, phases, stop)
                await first.full.wait()
                phases.append(second)
                counted = len(first)
                await second.full.wait()
                stop.set()
        assert len(first) == counted  # nothing went into the first phase after the switch
        assert len(second) >= PER_PHASE
        assert all(ms > 0 for ms in first + second)
        assert set(_children()) <= children_before  # the caller has exited (and was waited for)
    finally:
        await node.stop()
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


def _children() -> list[int]:
    """This process's child processes (Linux's /proc)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        return []


class _Watched(Window):
    """A window of the figure's phases that notes the last alarm commit (``BenchTicker``'s) and
    how many alarms wait at the gate, when it is made and when it is full."""

    def __init__(self, size: int, made: list[_Watched]) -> None:
        super().__init__(size)
        self.commit_before = BenchTicker.last_commit
        self.held_before = _held()
        self.commit_when_full: float | None = None
        self.held_when_full: int | None = None
        made.append(self)

    def append(self, ms: float) -> None:
        super().append(ms)
        if self.commit_when_full is None and self.full.is_set():
            self.commit_when_full = BenchTicker.last_commit
            self.held_when_full = _held()


def _held() -> int | None:
    return None if BenchTicker.held is None else len(BenchTicker.held)


@pytest.mark.slow
@pytest.mark.anyio
async def test_idle_and_burst_windows_alternate_after_the_measured_burst(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28's figure compares idle and burst windows, interleaved, an idle window holding
    twice a burst window's requests (the idle p99 is the noisier half and its requests cost no
    alarms), on a node of their own after the burst alarms_fired_per_s measures (which ran
    whole, every alarm fired, as before):
    no alarm commits, and none more reaches the gate (an open, a run), while an idle window is
    counted (the burst is held at the bench actor's gate, before its write; the stream's actor
    has no alarm due), alarms commit in the burst windows, each side
    holds its rounds' requests, each round's two p99s are kept for the note, and no alarm is
    left held once the phase is over. The idle phase before the measured burst holds at least
    its first answer, however short it is asked to be (a loaded machine's first answer, a cold
    open, can outlast the tests' 0.2 s: here the phase is asked for 1 ms), and the stream ends
    with it, before the burst's first alarm commits (alarms_fired_per_s is measured beside a
    raw cycle that serves no requests)."""
    made: list[_Watched] = []
    monkeypatch.setattr(ticker_figures, "Window", lambda size: _Watched(size, made))
    progress = Progress(enabled=False)
    data, first = await ticker_figures.make_population(tmp_path, TINY, progress)
    stream = ticker_figures._Stream([], [], [], [], [])
    real_stream = ticker_figures.request_stream
    commits_when_the_stream_ended: list[float] = []

    async def stream_ends(*args: object) -> None:
        await real_stream(*args)  # type: ignore[arg-type]
        commits_when_the_stream_ended.append(BenchTicker.last_commit)

    monkeypatch.setattr(ticker_figures, "request_stream", stream_ends)
    no_alarm_yet = BenchTicker.last_commit
    with anyio.fail_after(GUARD_S):
        burst = await ticker_figures._throughput(
            data, first, msgspec.structs.replace(TINY, stream_idle_s=0.001), progress, stream)
        assert burst.done and burst.fired == TINY.alarm_actors and burst.per_s > 0
        assert burst.activations > 0
        assert stream.before and not made  # no window in the measured burst's phase
        # The stream and its caller ended before the burst's first alarm committed.
        assert commits_when_the_stream_ended == [no_alarm_yet] < [BenchTicker.last_commit]
        await ticker_figures._windows(data, first, TINY, progress, stream)
    size, rounds = TINY.stream_window, TINY.stream_rounds
    assert len(stream.idle) == 2 * rounds * size and len(stream.burst) == rounds * size
    assert len(made) == 2 * rounds
    idle, burst = made[0::2], made[1::2]
    assert all(w.size == 2 * size for w in idle) and all(w.size == size for w in burst)
    assert len(stream.rounds) == rounds and all(i > 0 and b > 0 for i, b in stream.rounds)
    assert all(w.commit_when_full == w.commit_before for w in idle)
    assert all(w.held_before is not None and w.held_when_full == w.held_before for w in idle), \
        [(w.held_before, w.held_when_full, w.commit_before, w.commit_when_full) for w in made]
    assert any(w.commit_when_full is not None and w.commit_when_full > w.commit_before
               for w in burst)
    assert BenchTicker.held is None


@pytest.mark.anyio
async def test_the_limit_is_the_lower_of_the_idle_windows_and_the_idle_phase(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28's limit is never one the burst raised: the lower of the idle windows' p99 and
    the p99 of the idle phase before the measured burst (a node of its own, nothing held), each
    printed in the note, with what the windows flagged (a burst run dry) and how far the
    rounds' own ratios spread."""

    async def windows(data: Path, first: int, sizes: object, progress: object,
                      stream: ticker_figures._Stream) -> None:
        stream.idle.extend([0.2] * 100)
        stream.burst.extend([0.5] * 100)
        stream.flags.append("the burst ran out of alarms in burst window 2")
        stream.rounds.extend([(0.25, 0.5), (0.2, 0.5)])

    monkeypatch.setattr(ticker_figures, "_windows", windows)
    monkeypatch.setenv(LOOP_ENV, "asyncio")
    for before, limit in ((0.1, 0.1), (0.3, 0.2)):
        stream = ticker_figures._Stream([before] * 100, [], [], [], [])
        burst, idle = await ticker_figures._stream_figures(
            tmp_path, 0, TINY, Progress(enabled=False), "tiny", stream)
        assert burst.limit == idle.value == limit and burst.value == 0.5
        assert f"({before:.2f} ms)" in (burst.note or "") and "p99 0.20 ms" in (burst.note or "")
        assert "ran out of alarms in burst window 2" in (burst.note or "")
        assert "2.00-2.50x, median 2.25x" in (burst.note or "")
