"""The figures measured on one population of ``BenchTicker`` actors holding alarms.

Alarms fired/s (the capacity: all overdue at once), lateness p99 at 0.7 of that capacity and at an
overload of ``alarm_rate`` (real clock; a node started on a shifted clock stands in for waiting
days), memory per evicted and per active actor, and the raw open-write-close limit of an alarm on an
evicted actor, measured in chunks between the windows of the burst it is the limit of. The
population is made through the runtime: one actor per alarm millisecond is created by ``init``
calls and its file copied for the others; a node start then indexes them all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import multiprocessing
import os
import shutil
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import anyio
import anyio.to_thread
import msgspec

from mailbox_actors.alarms.book import AlarmBook
from mailbox_actors.alarms.scheduler import AlarmScheduler
from mailbox_actors.bench.actors import REARM_MS, BenchTicker, TickInit, ticker_name
from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median, percentile
from mailbox_actors.bench.memory_figures import active_memory, evicted_memory
from mailbox_actors.bench.request_stream import (
    PAUSE_S,
    Window,
    on_loop,
    request_stream,
    served_loop_name,
)
from mailbox_actors.node import Node
from mailbox_actors.node.loop_stalls import LoopStalls
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.run_queue import run_queue_wait_s
from mailbox_actors.platform.storage.handle import keep_wal_on_close
from mailbox_actors.runtime.settings import RuntimeSettings

__all__ = [
    "TICKER_FIGURES", "ShiftedClock", "create_tickers", "make_population", "raw_alarm_write", "tickers",
]

NS = BenchTicker.namespace
TENANT = "t_bench"
# The population's first alarm, relative to the real clock when it is made: nothing fires early.
FIRST_ALARM_AFTER_MS = 10 * 86_400_000
TICKER_FIGURES = ("alarms_fired_per_s", "raw_open_write_close_per_s",
                  "activations_per_fired_alarm", "alarm_lateness_p99_ms",
                  "alarm_lateness_overload_p99_ms", "memory_per_evicted_actor_bytes",
                  "memory_per_active_actor_bytes", "rss_after_eviction_bytes",
                  "request_p99_during_alarm_burst_ms", "request_p99_idle_ms")


class ShiftedClock(SystemClock):
    """The system clock moved by ``offset_ms``: real-time speed, another day."""

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms


def _real_ms() -> int:
    return time.time_ns() // 1_000_000


async def create_tickers(node: Node, alarms: list[int], progress: Progress,
                         what: str = "actors") -> None:
    """One ticker per alarm time through ``node.call``; ticker i's alarm is at ``alarms[i]``."""
    for i, at in enumerate(alarms):
        await node.call(NS, node.id_from_name(NS, ticker_name(i)), TickInit(alarm_at_ms=at),
                        tenant_id=TENANT)
        progress.tick("  created {:,}/{:,} {}", i + 1, len(alarms), what)


def _settings(data_dir: Path, sizes: Sizes) -> RuntimeSettings:
    return RuntimeSettings(data_dir=str(data_dir), max_active_actors=sizes.max_active)


def _due(i: int, first: int, sizes: Sizes) -> int:
    """Ticker i's first alarm: i / rate seconds after ``first``, rounded down to a batch."""
    g = sizes.alarm_batch_ms
    return first + i * 1000 // sizes.alarm_rate // g * g


async def make_population(work: Path, sizes: Sizes, progress: Progress,
                          idle: int = 0) -> tuple[Path, int]:
    """Ticker i's alarm at ``_due(i, first)``, and ``idle`` more actors whose alarms are a day
    after the last (held, not due, in the same index and directory); returns (data dir, first)."""
    data, tpl_dir = work / "node", work / "templates"
    first = _real_ms() + FIRST_ALARM_AFTER_MS
    g = sizes.alarm_batch_ms
    busy = sizes.alarm_actors
    later = _due(busy, 0, sizes) + 86_400_000

    def due(i: int) -> int:
        return _due(i, 0, sizes) if i < busy else later

    n = busy + idle
    times = sorted({due(i) for i in range(n)})  # the alarm times some actor has
    progress.say(f"alarms: population of {n:,} actors: creating {len(times):,} through the "
                 f"runtime (one per alarm time, every {g} ms or more)")
    async with Node(RuntimeSettings(data_dir=str(tpl_dir), max_active_actors=64),
                    objects=(BenchTicker,)) as tpl_node:
        await create_tickers(tpl_node, [first + t for t in times], progress, "template actors")
        templates = {t: tpl_node.host.path_for(NS, tpl_node.id_from_name(NS, ticker_name(k)))
                     for k, t in enumerate(times)}
    progress.say(f"alarms: copying them to {n:,} actors")
    target = Node(RuntimeSettings(data_dir=str(data)), objects=(BenchTicker,))  # not started
    made: set[Path] = set()
    for i in range(n):
        dest = target.host.path_for(NS, target.id_from_name(NS, ticker_name(i)))
        if dest.parent not in made:
            dest.parent.mkdir(parents=True, exist_ok=True)
            made.add(dest.parent)
        tpl = templates[due(i)]
        shutil.copyfile(tpl, dest)
        # With the log the runtime kept on close (ADR 0012): a copy is what a live node leaves.
        wal = tpl.with_name(tpl.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, dest.with_name(dest.name + "-wal"))
        progress.tick("  copied {:,}/{:,}", i + 1, n)
    shutil.rmtree(tpl_dir)
    progress.say(f"alarms: first node start scans the {n:,} files for alarms")
    async with Node(RuntimeSettings(data_dir=str(data)), objects=(BenchTicker,),
                    progress=lambda text: progress.tick("  {}", text)) as node:
        await node.alarms_loaded.wait()
        assert node.scheduler is not None
        if node.scheduler.pending_count != n:
            raise RuntimeError(f"expected {n} alarms, the node found "
                               f"{node.scheduler.pending_count}")
    # The copies are gigabytes of dirty pages (20,000 files and their logs, 1.6 GB in a quick
    # run), and the scan's opens rebuilt every file's -shm (32 KB, mapped: 640 MB more). Written
    # back by the kernel 30-60 s later, that is during the phases measured, the copies held
    # SQLite's reads on the loop 200-350 ms (request stream, session 14), and the -shm pages
    # were written back through the burst alarms_fired_per_s measures (session 17: 100-200 MB/s
    # of writes through it, none during the raw limit's first chunks). Written now, the phases
    # and the raw limit beside them measure the node and SQLite on files as a sleeping actor
    # leaves them (its -shm written back after its close), not the set-up's tail.
    progress.say(f"alarms: writing the {n:,} files and what the scan left to disk before "
                 "anything is measured")
    os.sync()
    return data, first


async def _wait_fired(node: Node, target: int, cap_s: float, progress: Progress,
                      what: str) -> tuple[float, bool]:
    """Poll every 5 ms until ``target`` alarms fired or ``cap_s`` passed; (perf_counter, done)."""
    sched = node.scheduler
    assert sched is not None
    stop = time.perf_counter() + cap_s
    BenchTicker.yield_after = stop
    try:
        while sched.fired < target:
            now = time.perf_counter()
            if now >= stop:
                return now, False
            await anyio.sleep(0.005)
            progress.tick("  {}: {:,}/{:,} fired, {:,} actors open", what, sched.fired, target,
                          node.host.active_count)
        return time.perf_counter(), True
    finally:
        BenchTicker.yield_after = 0.0  # from now on, so that stopping the node cancels promptly


async def _started(data: Path, sizes: Sizes, now_ms: int) -> tuple[Node, ShiftedClock]:
    """A node on the population, started, its clock reading ``now_ms`` at this moment."""
    clock = ShiftedClock(now_ms - _real_ms())
    node = Node(_settings(data, sizes), clock=clock, objects=(BenchTicker,))
    await node.start()
    return node, clock


async def _lateness(data: Path, first: int, sizes: Sizes, progress: Progress,
                    ) -> tuple[list[int], int, bool]:
    """Alarms arriving at ``rate``/s in real time; returns (lateness ms, fired, all fired)."""
    n, rate = sizes.alarm_actors, sizes.alarm_rate
    progress.say(f"alarms: lateness, {n:,} alarms arriving at {rate:,}/s "
                 f"(stops {sizes.alarm_phase_s:g} s after the last is due)")
    node, clock = await _started(data, sizes, first - 3_600_000)  # nothing due yet
    try:
        sched = node.scheduler
        assert sched is not None
        lateness: list[int] = []
        sched.lateness_ms = lateness
        clock.offset_ms = first - sizes.alarm_lead_ms - _real_ms()
        _, done = await _wait_fired(node, n, n / rate + sizes.alarm_lead_ms / 1000
                                    + sizes.alarm_phase_s, progress, "lateness")
        fired = sched.fired
        sched.lateness_ms = None
        if not done:
            # An alarm still waiting is at least this late: count it, or p99 would flatter us.
            now = clock.now_ms()
            for i in range(n):
                at = sched.pending((NS, node.id_from_name(NS, ticker_name(i))))
                if at is not None and at < first + REARM_MS // 2 and at <= now:
                    lateness.append(now - at)
    finally:
        await node.stop()
        BenchTicker.yield_after = None
    return lateness, fired, done


class _Stream(NamedTuple):
    """The request stream's milliseconds: ``before`` the burst alarms_fired_per_s measures
    (``sizes.stream_idle_s``, nothing due; the stream ends there: that figure's limit, the raw
    cycle, serves no requests); ``idle`` and ``burst``, the interleaved windows on a node of
    their own (``_windows``), the figure's, and each round's p99s (``rounds``: idle window's,
    burst window's); ``flags``, what the note must say about the windows (a settle cut short, a
    burst run dry)."""

    before: list[float]
    idle: list[float]
    burst: list[float]
    flags: list[str]
    rounds: list[tuple[float, float]]


# A window of the evicted actors' burst, between two chunks of the raw cycle.
_WINDOW_S = 1.0
# The least files a chunk of the raw cycle opens, writes and closes (one thread, or
# ``file_threads``): there is a chunk before each window, and fewer when the sample is short.
_MIN_CHUNK = 100
# How often the end of a hold is looked for (``_held_still``): counted in the burst's time.
_HOLD_POLL_S = 0.002


class _Burst(NamedTuple):
    """What ``_throughput`` measured: the burst's rate over its windows (``per_s``), the alarms
    fired and files opened by the node over the whole phase, whether it fired every alarm it
    was to (``done``), and the raw cycle's chunk rates taken between its windows, one thread
    (``single``) and ``file_threads`` at once (``pooled``)."""

    per_s: float
    fired: int
    done: bool
    activations: int
    single: list[float]
    pooled: list[float]
    rates: list[float]  # each window's alarms/s


async def _throughput(data: Path, first: int, sizes: Sizes, progress: Progress,
                      stream: _Stream | None = None, raw: list[Path] | None = None,
                      threads: int = 1) -> _Burst:
    """Every alarm overdue at once, fired in windows with the raw cycle's chunks between them
    (``raw``: the files it opens, copies the node does not know). The node starts with
    nothing due; with ``stream``, an outside caller's requests (``request_stream``) run first
    for ``sizes.stream_idle_s`` (into ``stream.before``), and end (the caller's process too)
    before the burst: the raw cycle it is measured beside serves none, and the requests during
    a burst are ``request_p99_during_alarm_burst_ms``'s, in windows of their own (``_windows``).
    Then the node's clock moves past every alarm,
    and the burst is held at the bench actor's gate (``BenchTicker.held``: a handler waits
    there, before its write) except in its windows: a raw chunk, then a window of
    ``_WINDOW_S``, then the next chunk, for ``sizes.alarm_phase_s`` of windows at most (once
    the chunks ran out, the rest of it in one window). A window's time runs from its
    release to the end of the next hold (the alarms under way at the gate, the index writes
    they left written), so it pays for everything its alarms left to do; the alarms held at
    the gate when a window starts were opened in the one before (the first window's before
    any, untimed; the last window's are opened and never counted). Chunks left when the
    burst runs out of alarms run after it."""
    n = sizes.alarm_actors
    raw = raw or []
    planned = max(1, round(sizes.alarm_phase_s / _WINDOW_S))
    count = min(planned, max(2, len(raw) // _MIN_CHUNK)) if raw else 0
    per_chunk = -(-len(raw) // count) if raw else 0
    chunks = [raw[i:i + per_chunk] for i in range(0, len(raw), per_chunk)] if raw else []
    reach = n
    progress.say(f"alarms: throughput, {n:,} alarms overdue at once"
                 f"{'' if stream is None else ' after an idle request stream'}, in windows of "
                 f"{_WINDOW_S:g} s, each after a chunk of the raw cycle ({len(chunks)} chunks)")
    # Past every alarm (first ones and those re-armed in the lateness phase); what fires here
    # re-arms a day after this clock, so no actor fires twice.
    past = first + 2 * REARM_MS
    # The raw cycle runs in a process of its own, started (and its imports made) before the
    # node: in the node's process it would share the node's interpreter lock and SQLite's
    # process-wide list of open files (the alarms held at the gate keep theirs open).
    cycle = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(
        "spawn"))
    await anyio.to_thread.run_sync(cycle.submit(_raw_chunk, [], 1).result)
    node, clock = await _started(data, sizes, first - 3_600_000)  # nothing due yet
    single: list[float] = []
    pooled: list[float] = []
    rates: list[float] = []
    held: list[asyncio.Future[None]] = []
    try:
        sched = node.scheduler
        assert sched is not None
        await node.alarms_loaded.wait()  # idle: the index loaded, nothing due
        if stream is not None:
            async with anyio.create_task_group() as tg:
                ended = anyio.Event()
                tg.start_soon(request_stream, node, TENANT, [stream.before], ended)
                with _stalls_recorded("idle"):
                    await anyio.sleep(sizes.stream_idle_s)
                    # ...and until its first answer (a cold open): on a loaded machine a short
                    # idle phase (the tests' 0.2 s) could end with none, a reference of nothing.
                    for _ in range(6_000):
                        if stream.before:
                            break
                        await anyio.sleep(0.01)
                ended.set()  # the stream and its caller's process end here
        BenchTicker.held = held
        BenchTicker.yield_after = None  # each alarm one transaction
        fired0, opened0 = sched.fired, node.host.activations
        clock.offset_ms = past - _real_ms()
        sched.book.wake_if_before(0)  # the loop looks now, not at its next wait's end
        await _held_still(sched, held, reach - (sched.fired - fired0))
        busy, counted, w, done = 0.0, 0, 0, False
        with _stalls_recorded("burst" if stream is not None else "throughput"):
            while not done and busy < sizes.alarm_phase_s:
                interleaved = w < len(chunks)
                if interleaved:
                    rate = await _raw_in(cycle, chunks[w], 1 if w % 2 == 0 else threads)
                    (single if w % 2 == 0 else pooled).append(rate)
                t0, before = time.perf_counter(), sched.fired
                BenchTicker.held = None
                await _let_go(held)
                left = sizes.alarm_phase_s - busy
                stop = t0 + (min(_WINDOW_S, left) if interleaved else left)
                while time.perf_counter() < stop and sched.fired - fired0 < reach:  # noqa: ASYNC110
                    await anyio.sleep(0.005)  # as _wait_fired: a count, not an event
                held = []
                BenchTicker.held = held
                await _held_still(sched, held, reach - (sched.fired - fired0))
                took = time.perf_counter() - t0
                busy += took
                counted += sched.fired - before
                rates.append((sched.fired - before) / took)
                w += 1
                progress.tick("  throughput: window {}, {:,}/{:,} fired", w,
                              sched.fired - fired0, reach)
                done = sched.fired - fired0 >= reach
        for k in range(w, len(chunks)):  # the burst ran out of alarms, or time, first
            rate = await _raw_in(cycle, chunks[k], 1 if k % 2 == 0 else threads)
            (single if k % 2 == 0 else pooled).append(rate)
        # Each alarm held at the gate now had its file opened for it, and fires later.
        opened = node.host.activations - opened0 - len(held)
    finally:
        BenchTicker.held = None
        BenchTicker.yield_after = 0.0  # from now on, so that stopping the node cancels promptly
        await _let_go(held)
        await node.stop()
        BenchTicker.yield_after = None
        # Waited for: its CPU is the bench's own in the notes (``cpu_share``), not others'.
        await anyio.to_thread.run_sync(cycle.shutdown)
    # The alarms held when the first window opened were opened before it, untimed; those held
    # when the last ended were opened in it, and are not counted.
    return _Burst(counted / busy if busy > 0 else 0.0, counted, done,
                  opened, single, pooled, rates)


async def _held_still(sched: AlarmScheduler, held: list[asyncio.Future[None]],
                      left: int) -> None:
    """The burst held: as many alarms wait at the gate as can be under way (the pool's workers,
    or the ``left`` not fired yet, or those the queue still has), looked at every
    ``_HOLD_POLL_S`` (or ``_SETTLE_S`` passed); then the index writes the burst left are made
    at once, the work the scheduler's loop would do in pieces when its next flush is due (up
    to ``_LAZY_FLUSH_MS``, 200 ms, later: an idle wait the window would count)."""
    end = time.perf_counter() + _SETTLE_S
    while time.perf_counter() < end:
        await anyio.sleep(_HOLD_POLL_S)
        if len(held) >= min(sched.running_count, sched.concurrency, max(0, left)):
            break
    sched.flush_index()


def _copied(sources: list[Path], to: Path) -> list[Path]:
    """Copies of actor files in ``to`` (each with its log and index, where it has them); their
    paths, in order."""
    to.mkdir(parents=True, exist_ok=True)
    out = []
    for k, src in enumerate(sources):
        dest = to / f"{k:06d}.sqlite"
        shutil.copyfile(src, dest)
        for suffix in ("-wal", "-shm"):
            side = src.with_name(src.name + suffix)
            if side.exists():
                shutil.copyfile(side, dest.with_name(dest.name + suffix))
        out.append(dest)
    return out


async def _raw_in(cycle: concurrent.futures.Executor, paths: list[Path], threads: int) -> float:
    """``_raw_chunk`` run in ``cycle``'s process (the node's loop goes on meanwhile)."""
    return await anyio.to_thread.run_sync(cycle.submit(_raw_chunk, paths, threads).result)


def _raw_chunk(paths: list[Path], threads: int) -> float:
    """The rate of one chunk of raw open-write-close runs over ``paths``, in ``threads``
    threads (the runtime opens and closes evicted actors' files in as many: ``file_threads``)."""
    if not paths:
        return 0.0  # the process started and its imports made
    t = time.perf_counter()
    if threads <= 1:
        for p in paths:
            raw_alarm_write(p)
    else:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(_raw_writes, [paths[i::threads] for i in range(threads)]))
    return len(paths) / (time.perf_counter() - t)


async def _windows(data: Path, first: int, sizes: Sizes, progress: Progress,
                   stream: _Stream) -> None:
    """The request stream's idle and burst windows (``_interleaved``) on a node of their own,
    started with nothing due: the last phase on the population, so that the alarms it fires
    change no file another figure reads (the raw limit beside alarms_fired_per_s is measured
    on the same files after the burst, as before)."""
    progress.say(f"alarms: request stream, {sizes.stream_rounds} rounds of an idle and a "
                 f"burst window of {sizes.stream_window:,} requests each")
    node, clock = await _started(data, sizes, first - 3_600_000)  # nothing due yet
    try:
        await node.alarms_loaded.wait()
        async with anyio.create_task_group() as tg:
            ended = anyio.Event()
            phases: list[list[float]] = [[]]
            tg.start_soon(request_stream, node, TENANT, phases, ended)
            try:
                await _interleaved(node, clock, first, phases, stream, sizes, progress)
            finally:
                ended.set()
    finally:
        BenchTicker.held = None
        await node.stop()
        BenchTicker.yield_after = None


# How long the alarms under way when the burst is held are given to reach the gate (and the
# index writes they leave to be written) before an idle window starts, at most.
_SETTLE_S = 5.0
# Then a quiet gap before the idle window, counted nowhere: what the burst left to the machine
# (closes behind in file threads, the kernel writing its pages back) has that long to fade.
_QUIET_S = 0.5
_WINDOW_GUARD_S = 300.0  # a window's requests answered within this, or the phase failed
# An idle window holds this many times a burst window's requests. The burst windows' requests
# are bounded by the alarms there are to fire (a quick run's 20,000 last about 10 s of burst),
# an idle window's by nothing but time; and the idle p99 is the figure's noisier half: it is
# set by the rare slow request of a machine that has nothing to do (0.205 and 0.327 ms in the
# quiet runs that ended sessions 19 and 18), so it gets the more requests.
_IDLE_SHARE = 2


async def _interleaved(node: Node, clock: ShiftedClock, first: int, phases: list[list[float]],
                       stream: _Stream, sizes: Sizes, progress: Progress) -> None:
    """``sizes.stream_rounds`` rounds of an idle window of ``_IDLE_SHARE`` times
    ``sizes.stream_window`` requests and a burst window of ``sizes.stream_window`` (into
    ``stream.idle`` and ``stream.burst``, each round's p99s into ``stream.rounds``): every alarm
    due at once (past those the earlier phases re-armed), the burst held between windows by
    the bench actor's gate (``BenchTicker.held``: a handler waits there before its write) and let go for
    each burst window. Idle and burst windows alternate, a second or so each, so both see the
    same stretch of the machine's load: a reference taken in the seconds before the burst
    alone moved by 3x from run to run on a shared machine. An idle window starts once the
    alarms under way reached the gate and the index writes they left are written, and
    ``_QUIET_S`` after (requests answered meanwhile are counted nowhere). The stream's own
    actor has no alarm due here: a request to an actor whose handler is held would wait for
    the gate."""
    sched = node.scheduler
    assert sched is not None
    size = sizes.stream_window
    held: list[asyncio.Future[None]] = []
    BenchTicker.held = held
    BenchTicker.yield_after = None  # each alarm one transaction again, as in the burst
    phases.append([])
    await node.call(NS, node.id_from_name(NS, ticker_name(0)),
                    TickInit(alarm_at_ms=first + 10 * REARM_MS), tenant_id=TENANT)
    # Every other actor due: the earlier phases' clocks went up to a day or two past ``first``
    # and what fired re-armed a day after that.
    due, fired = sizes.alarm_actors - 1, sched.fired
    clock.offset_ms = first + 4 * REARM_MS - _real_ms()
    sched.book.wake_if_before(0)
    try:
        for r in range(sizes.stream_rounds):
            # Every worker holds one at the gate, or every alarm not fired yet is held there.
            if not await _settled(sched.book, held,
                                  lambda: min(sched.concurrency, due - (sched.fired - fired))):
                stream.flags.append(f"round {r + 1}: {len(held)} alarms held after "
                                    f"{_SETTLE_S:g} s, fewer than under way")
                progress.say(f"alarms: request stream: {stream.flags[-1]}")
            await anyio.sleep(_QUIET_S)
            idle = Window(_IDLE_SHARE * size)
            phases.append(idle)
            with anyio.fail_after(_WINDOW_GUARD_S):
                await idle.full.wait()
            burst = Window(size)
            phases.append(burst)
            BenchTicker.held = None
            await _let_go(held)
            with anyio.fail_after(_WINDOW_GUARD_S):
                await burst.full.wait()
            if due - (sched.fired - fired) <= 0:
                stream.flags.append(f"the burst ran out of alarms in burst window {r + 1}")
            held = []
            BenchTicker.held = held
            phases.append([])
            stream.idle.extend(idle[:idle.size])
            stream.burst.extend(burst[:size])
            stream.rounds.append((percentile(idle[:idle.size], 99), percentile(burst[:size], 99)))
            progress.tick("  interleaved windows: {}/{} rounds", r + 1, sizes.stream_rounds)
    finally:
        BenchTicker.held = None
        BenchTicker.yield_after = 0.0  # from now on, so that stopping the node cancels promptly
        await _let_go(held)


async def _settled(book: AlarmBook, held: list[asyncio.Future[None]],
                   in_flight: Callable[[], int]) -> bool:
    """As many alarms wait at the gate as can be under way (``in_flight()``: the pool's
    workers, or fewer alarms left) and no index write is left (``book.has_lazy``), or
    ``_SETTLE_S`` passed: nothing of the burst runs on the loop any more. (A pause in the
    alarms' progress is no sign: on a loaded machine the first ones reached the gate only
    after 100 ms.) False: ``_SETTLE_S`` passed."""
    end = time.perf_counter() + _SETTLE_S
    while time.perf_counter() < end:
        await anyio.sleep(0.01)
        if len(held) >= in_flight() and not book.has_lazy:
            return True
    return False


async def _let_go(held: list[asyncio.Future[None]]) -> None:
    """Release the held alarms one a round of the loop, as a burst's alarms resume (all in one
    round, the first requests of a burst window would wait for some 30 writes)."""
    for waiting in held:
        if not waiting.done():
            waiting.set_result(None)
            await asyncio.sleep(0)


@contextlib.contextmanager
def _stalls_recorded(phase: str) -> Iterator[None]:
    """The loop's stalls over 1 ms appended to the file ``MAILBOX_ACTORS_LOOP_STALLS`` names
    (JSON lines, ``node/loop_stalls.py``), when it names one; else nothing is watched."""
    path = os.environ.get("MAILBOX_ACTORS_LOOP_STALLS")
    if not path:
        yield
        return
    stalls = LoopStalls()
    with stalls.watching():
        yield
    stalls.write(Path(path), phase=phase, callbacks=stalls.callbacks)


def raw_alarm_write(path: Path) -> None:
    """What an alarm on an evicted actor must do at the least: open, one small write, close,
    with the best durable settings the runtime could use: WAL, synchronous=NORMAL (the default
    durability) and the log kept on close (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, ADR 0012)."""
    conn = sqlite3.connect(path, isolation_level=None)
    keep_wal_on_close(conn, path)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("BEGIN")
    conn.execute("UPDATE ticks SET fired = fired + 1 WHERE id = 1")
    conn.execute("UPDATE _ma_alarm SET at_ms = at_ms WHERE id = 1")  # the alarm row, unchanged
    conn.execute("COMMIT")
    conn.close()


def _raw_writes(paths: list[Path]) -> None:
    for p in paths:
        raw_alarm_write(p)


async def _overload_figures(data: Path, first: int, sizes: Sizes, progress: Progress,
                            scale: str) -> list[Figure]:
    lateness, fired, done = await _lateness(data, first, sizes, progress)
    cut = "" if done else (f"; stopped {sizes.alarm_phase_s:g} s after the last was due, "
                           f"with {fired:,} fired; each unfired alarm is counted as late as "
                           "it was then")
    found = figure(
        "alarm_lateness_overload_p99_ms", percentile(lateness, 99), "ms",
        note=f"overload: {scale}, arriving at {sizes.alarm_rate:,}/s (past the capacity that "
             f"alarms_fired_per_s measures) in batches every {sizes.alarm_batch_ms} ms, real "
             f"clock; at most {sizes.max_active:,} open; max {max(lateness, default=0):,} ms"
             f"{cut}")
    found.target = "no target (offered past the capacity; the target is for within it)"
    return [found]


async def _paced_figures(work: Path, capacity: float, sizes: Sizes, progress: Progress,
                         ) -> list[Figure]:
    """Lateness with alarms arriving at 0.7 of ``capacity`` in real time, each due at its own
    instant, on a population of their own (made for that rate, every one evicted)."""
    rate = max(1, int(0.7 * capacity))
    n = max(20, int(rate * sizes.paced_alarm_s))
    idle = max(0, sizes.alarm_actors - n)  # the population's size, as in the other phases
    paced = msgspec.structs.replace(sizes, alarm_actors=n, alarm_rate=rate, alarm_batch_ms=1)
    progress.say(f"alarms: lateness within capacity, {n:,} alarms arriving at {rate:,}/s "
                 f"(0.7 of the {capacity:,.0f}/s measured) among {n + idle:,} actors")
    data, first = await make_population(work, paced, progress, idle)
    # On the loop the capacity was measured on: 0.7 of one loop's capacity offered to another
    # is not 0.7 of its own.
    loop = _alarm_loop()
    lateness, fired, done, waited = await on_loop(loop, _lateness_waited, data, first, paced,
                                                  progress)
    # A late alarm is the runtime's, or the machine's: how long the node waited for a CPU says.
    busy = "" if waited is None else (
        f"; the node's thread waited {waited:,.0f} ms for a CPU meanwhile (schedstat)")
    cut = "" if done else (f"; stopped {sizes.alarm_phase_s:g} s after the last was due, "
                           f"with {fired:,} fired; each unfired alarm is counted as late as "
                           "it was then")
    return [figure(
        "alarm_lateness_p99_ms", percentile(lateness, 99), "ms", goal=Goal("below", 50),
        note=f"within capacity, the node on {loop}'s loop: {n:,} evicted actors' alarms "
             f"arriving at {rate:,}/s among "
             f"{n + idle:,} evicted actors holding alarms (the others' a day later), 0.7 of "
             f"the {capacity:,.0f}/s alarms_fired_per_s measured in this run, each due at its "
             f"own millisecond, real clock; at most {sizes.max_active:,} open; max "
             f"{max(lateness, default=0):,} ms{cut}{busy}")]


async def _lateness_waited(data: Path, first: int, sizes: Sizes, progress: Progress,
                           ) -> tuple[list[int], int, bool, float | None]:
    """``_lateness``, and how long the thread it ran on waited for a CPU meanwhile (None where
    that is not reported)."""
    waited = run_queue_wait_s()
    lateness, fired, done = await _lateness(data, first, sizes, progress)
    after = run_queue_wait_s()
    return lateness, fired, done, None if waited is None or after is None else \
        (after - waited) * 1000


def _alarm_loop() -> str:
    """The loop the evicted actors' alarm phases run their node on: the one a served node runs
    on (uvloop), where the pool's look is that loop's own; asyncio's while the loop's stalls are
    recorded (LoopStalls watches that loop only)."""
    return "asyncio" if os.environ.get("MAILBOX_ACTORS_LOOP_STALLS") else served_loop_name()


async def _throughput_figures(data: Path, first: int, sizes: Sizes, progress: Progress,
                              scale: str, stream: _Stream) -> list[Figure]:
    n = sizes.alarm_actors
    target = Node(RuntimeSettings(data_dir=str(data)), objects=(BenchTicker,))  # not started
    # The raw cycle's files: copies of a sample of the population, each with its log and its
    # emptied -shm, as a sleeping actor leaves them, written to disk before the phase (as the
    # population is): neither side opens a file the other wrote in the phase.
    step = max(1, n // sizes.raw_alarm_sample)
    sources = [target.host.path_for(NS, target.id_from_name(NS, ticker_name(i)))
               for i in range(0, n, step)][:sizes.raw_alarm_sample]
    copies = data.parent / "raw-cycle"
    paths = _copied(sources, copies)
    os.sync()
    threads = _settings(data, sizes).file_threads
    loop = _alarm_loop()
    try:
        burst = await on_loop(loop, _throughput, data, first, sizes, progress, stream, paths,
                              threads)
    finally:
        shutil.rmtree(copies, ignore_errors=True)
    single, pooled = burst.single, burst.pooled
    raw = max(median(single), median(pooled))
    cut = "" if burst.done else f"; the windows fired {burst.fired:,} of the {n:,}"
    return [
        figure("alarms_fired_per_s", burst.per_s, "alarms/s", goal=Goal("ratio_at_least", 0.6),
               limit=raw,
               note=f"{scale}, all overdue at once, the node on {loop}'s loop; at most "
                    f"{sizes.max_active:,} open; fired in {len(burst.rates)} windows of "
                    f"{_WINDOW_S:g} s ({_spread(burst.rates)} alarms/s), the burst held at the "
                    "bench actor's gate between them while a chunk of the raw cycle ran "
                    f"({len(burst.single) + len(burst.pooled)} chunks){cut}; no requests "
                    "served during the burst (the request stream ends with the idle phase "
                    "before it; request_p99_during_alarm_burst_ms measures requests under a "
                    "burst); limit = raw "
                    "open + write + close "
                    f"of evicted actors' files, the better of one file at a time and {threads} "
                    f"at once (the node opens and closes files in up to {threads} worker "
                    "threads, file_threads, its commits on the event loop)"),
        figure("raw_open_write_close_per_s", raw, "tx/s",
               note=f"the better of two medians of chunks over copies of {len(paths):,} actor "
                    f"files (written to disk before the phase, as the population is), each "
                    f"chunk run before one of the burst's windows: one "
                    f"thread {median(single):,.0f}/s ({len(single)} chunks, {_spread(single)}), "
                    f"{threads} threads {median(pooled):,.0f}/s ({len(pooled)} chunks, "
                    f"{_spread(pooled)}; the runtime opens "
                    f"and closes evicted actors' files in {threads}, file_threads); each run "
                    "sqlite3.connect, WAL, synchronous=NORMAL, the log kept on close "
                    "(NO_CKPT_ON_CLOSE, as the runtime sets it), one write transaction, close; "
                    "not locking_mode=EXCLUSIVE, which the runtime cannot use (ADR 0012)"),
        figure("activations_per_fired_alarm", burst.activations / max(1, burst.fired),
               "activations", goal=Goal("below", 1.05),
               note=f"files opened by the node per alarm fired in the throughput phase's "
                    f"windows ({burst.activations:,} for {burst.fired:,})"),
    ]


def _spread(rates: list[float]) -> str:
    return f"{min(rates, default=0):,.0f}-{max(rates, default=0):,.0f}"


async def _stream_figures(data: Path, first: int, sizes: Sizes, progress: Progress,
                          scale: str, stream: _Stream) -> list[Figure]:
    loop = _alarm_loop()
    await on_loop(loop, _windows, data, first, sizes, progress, stream)
    windows, before = percentile(stream.idle, 99), percentile(stream.before, 99)
    # The limit is the lower of the idle windows' p99 and the p99 of the idle phase on the
    # throughput node (nothing held, no burst yet): whatever of the burst the windows still
    # carry never raises it.
    limit = min(windows, before) if stream.before else windows
    which = ("the idle windows'" if limit == windows else
             f"the {sizes.stream_idle_s:g} s idle phase's, lower than the idle windows'")
    flags = "".join(f"; {flag}" for flag in stream.flags)
    ratios = sorted(b / i for i, b in stream.rounds if i > 0)
    spread = (f"; round by round, burst window p99 / idle window p99 {ratios[0]:.2f}-"
              f"{ratios[-1]:.2f}x, median {median(ratios):.2f}x" if ratios else "")
    return [
        figure("request_p99_during_alarm_burst_ms", percentile(stream.burst, 99), "ms",
               goal=Goal("ratio_at_most", 3), limit=limit,
               note=f"the node on {loop}'s loop (as serve runs it); an outside caller (a process "
                    f"of its own, over a socket pair) reading one actor, one request after "
                    f"another with {PAUSE_S * 1000:g} ms between, each timed from its sending to "
                    f"its answer, while the {scale} fire, in {sizes.stream_rounds} windows of "
                    f"{sizes.stream_window:,} requests ({len(stream.burst):,}, p50 "
                    f"{percentile(stream.burst, 50):.2f} ms, max "
                    f"{max(stream.burst, default=math.nan):.1f} ms), each after an idle window "
                    f"of {_IDLE_SHARE} times as many on the same node, the burst held at the "
                    f"bench actor's gate and {_QUIET_S:g} s let pass ({len(stream.idle):,} "
                    f"requests, p99 "
                    f"{windows:.2f} ms, p50 {percentile(stream.idle, 50):.2f} ms, max "
                    f"{max(stream.idle, default=math.nan):.1f} ms); the limit is the lower of "
                    f"that p99 and the p99 of {len(stream.before):,} requests in the "
                    f"{sizes.stream_idle_s:g} s before the burst alarms_fired_per_s measures, "
                    f"on a node of its own, nothing due ({before:.2f} ms): {which}"
                    f"{spread}{flags}"),
        figure("request_p99_idle_ms", limit, "ms",
               note="the request stream's p99 with no alarm due (the limit above): the lower "
                    "of the idle windows' between the burst windows and the idle phase's "
                    "before the measured burst"),
    ]


async def tickers(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                  errors: list[str]) -> list[Figure]:
    """The figures of ``TICKER_FIGURES`` that are in ``want``, on one population. A part that
    fails is reported in ``errors`` and the others still run."""
    n = sizes.alarm_actors
    data, first = await make_population(work, sizes, progress)
    scale = (f"{n:,} actors holding alarms" + ("" if n >= 100_000 else
             f" ({sizes.name} run; the full run uses 100,000)"))
    capacity: list[float] = []  # alarms_fired_per_s, for the phase within it
    # The request stream's: the throughput phase, then after.
    stream = _Stream([], [], [], [], [])

    async def throughput() -> list[Figure]:
        found = await _throughput_figures(data, first, sizes, progress, scale, stream)
        capacity.append(found[0].value)
        return found

    async def paced() -> list[Figure]:
        if not capacity:
            raise RuntimeError("no capacity to pace by: the throughput phase failed")
        return await _paced_figures(work / "paced", capacity[0], sizes, progress)

    parts: list[tuple[set[str], Callable[[], Awaitable[list[Figure]]]]] = [
        ({"memory_per_evicted_actor_bytes"}, lambda: evicted_memory(
            data, work / "empty", n, BenchTicker, progress, scale)),
        ({"alarm_lateness_overload_p99_ms"}, lambda: _overload_figures(data, first, sizes,
                                                                       progress, scale)),
        # The capacity is measured whenever the lateness within it is wanted.
        ({"alarms_fired_per_s", "raw_open_write_close_per_s", "activations_per_fired_alarm",
          "alarm_lateness_p99_ms", "request_p99_during_alarm_burst_ms", "request_p99_idle_ms"},
         throughput),
        ({"alarm_lateness_p99_ms"}, paced),
        ({"memory_per_active_actor_bytes", "rss_after_eviction_bytes"}, lambda: active_memory(
            data, min(sizes.memory_active, n // 2), progress)),
        # Last: the alarms its windows fire change files the parts above read.
        ({"request_p99_during_alarm_burst_ms", "request_p99_idle_ms"}, lambda: _stream_figures(
            data, first, sizes, progress, scale, stream)),
    ]
    out: dict[str, Figure] = {}
    for names, part in parts:
        if not names & want:
            continue
        try:
            for f in await part():
                out[f.figure] = f
        except Exception as e:  # the population is costly: keep what the other parts measure
            errors.append(f"{'/'.join(sorted(names))}: {type(e).__name__}: {e}")
            progress.say(f"{'/'.join(sorted(names))} failed: {type(e).__name__}: {e}")
    return [out[name] for name in TICKER_FIGURES if name in out]
