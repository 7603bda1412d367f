"""A record of the event loop's stalls: each piece of work it ran whole for longer than a threshold,
and what it was (a debugging instrument; issue 28's request latency during an alarm burst).

A request waits for whatever holds the loop thread when it arrives: one callback (a task's step
runs from one ``await`` to the next), the collector's pass inside it, or the wait to get the
interpreter back from another thread after the loop's poll. ``LoopStalls.watching()`` times each of
those on the running loop and keeps the ones over ``threshold_s`` as ``Stall`` rows: how long, how
much of it the loop thread's CPU and how much the cyclic collector, and what ran (a task's
coroutine, where its step resumed and where it next waited; a plain callback's name). A stall's
wall time splits into the loop thread's CPU, its wait for a CPU the system gave to another thread
or process (``queued_ms``, Linux's schedstat), and the rest: the thread blocked, waiting for the
interpreter's lock held by another thread of the process (a file thread's Python), for the disk or
for a lock.

It wraps asyncio's ``Handle._run`` and the loop selector's ``select`` while it watches, so it works
on asyncio's own loop only (not uvloop's), and it costs about 5 microseconds of CPU a callback
(a bare task step of 1.9 us takes 7.2 us watched, 4.5 us without the run-queue reads; what ran
is only formatted for a stall): a measuring aid, never on in a served node, and figures measured
with it on are slowed by it.
``bench`` writes the burst's stalls to the file named by ``MAILBOX_ACTORS_LOOP_STALLS``
(``bench/ticker_figures.py``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import CodeType, CoroutineType, FrameType, GeneratorType
from typing import Any

from mailbox_actors.platform.run_queue import RunQueueClock

__all__ = ["LoopStalls", "Stall", "summary"]


@dataclass(frozen=True, slots=True)
class Stall:
    """One piece of work the loop ran whole: ``kind`` is ``callback`` (a task's step or a plain
    callback), ``poll`` (the loop's poll for I/O that was to return at once and took long: the
    wait for the interpreter's lock or for a CPU) or ``gc`` (a collector's pass, also counted in
    the callback it ran in)."""

    at_s: float  # when it began, seconds after watching began
    kind: str
    wall_ms: float
    cpu_ms: float  # the loop thread's CPU meanwhile
    gc_ms: float  # the collector's passes inside it
    what: str
    # The loop thread's wait for a CPU meanwhile (runnable, the CPUs busy with other work); the
    # rest of ``wall_ms`` past this and ``cpu_ms``: blocked (the GIL, the disk, a lock).
    queued_ms: float = 0.0


class LoopStalls:
    """Stalls of the loop ``watching()`` runs on, over ``threshold_s``; ``stalls`` in order."""

    def __init__(self, threshold_s: float = 0.001, *,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu: Callable[[], float] = time.thread_time,
                 queued: Callable[[], float] | None = None) -> None:
        self.threshold_s = threshold_s
        self.stalls: list[Stall] = []
        self.callbacks = 0  # callbacks run while watching
        self._clock = clock
        self._cpu = cpu
        self._queued = queued  # None: the watching thread's, from its schedstat
        self._began = 0.0
        self._gc_ms = 0.0  # the collector's time since the running callback began
        self._gc_at = self._gc_cpu = 0.0
        self._thread = 0  # the loop's

    @contextmanager
    def watching(self) -> Iterator[LoopStalls]:
        """Record the running loop's stalls until the block ends."""
        loop = asyncio.get_running_loop()
        selector = getattr(loop, "_selector", None)
        if selector is None:
            raise RuntimeError("LoopStalls watches asyncio's own event loop only")
        handle_run = asyncio.Handle._run
        select = selector.select
        own_select = "select" in vars(selector)  # set on the instance before: put it back
        me, clock, cpu = self, self._clock, self._cpu
        own_queued = RunQueueClock() if self._queued is None else None
        queued = self._queued or own_queued
        assert queued is not None
        threshold = self.threshold_s

        def timed_run(handle: asyncio.Handle) -> None:
            me._gc_ms = 0.0
            t, c, q = clock(), cpu(), queued()
            before = _site(handle)
            try:
                handle_run(handle)
            finally:
                me.callbacks += 1
                wall = clock() - t
                if wall > threshold:
                    me._add(t, "callback", wall, cpu() - c, me._gc_ms, _what(before, handle),
                            queued() - q)

        def timed_select(timeout: float | None = None) -> Any:
            t, c, q = clock(), cpu(), queued()
            events = select(timeout)
            wall = clock() - t
            if timeout is not None and wall > threshold + timeout:
                me._add(t, "poll", wall, cpu() - c, 0.0,
                        f"poll for I/O with a timeout of {timeout * 1000:.2f} ms", queued() - q)
            return events

        self._began = clock()
        self._thread = threading.get_ident()
        asyncio.Handle._run = timed_run  # type: ignore[method-assign,assignment]
        selector.select = timed_select
        gc.callbacks.append(self._on_gc)
        try:
            yield self
        finally:
            gc.callbacks.remove(self._on_gc)
            if own_select:
                selector.select = select
            else:
                del selector.select
            asyncio.Handle._run = handle_run  # type: ignore[method-assign]
            if own_queued is not None:
                own_queued.close()  # a callback that ends the watching reads it once more

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now, cpu = self._clock(), self._cpu()
        if phase == "start":
            self._gc_at, self._gc_cpu = now, cpu
            return
        took = now - self._gc_at
        self._gc_ms += took * 1000
        if took > self.threshold_s:
            self.stalls.append(Stall(
                round(self._gc_at - self._began, 6), "gc", round(took * 1000, 3),
                round((cpu - self._gc_cpu) * 1000, 3), round(took * 1000, 3),
                f"generation {info.get('generation')} pass, {info.get('collected', 0)} collected"
                + ("" if threading.get_ident() == self._thread else
                   f", in thread {threading.current_thread().name} (the loop waits for the GIL)")))

    def _add(self, t: float, kind: str, wall: float, cpu: float, gc_ms: float, what: str,
             queued: float = 0.0) -> None:
        self.stalls.append(Stall(round(t - self._began, 6), kind, round(wall * 1000, 3),
                                 round(cpu * 1000, 3), round(gc_ms, 3), what,
                                 round(queued * 1000, 3)))

    def write(self, path: Path, **labels: object) -> None:
        """Append the stalls to ``path`` as JSON lines, each with ``labels``."""
        with path.open("a") as f:
            for s in self.stalls:
                f.write(json.dumps(labels | asdict(s)) + "\n")


def summary(stalls: list[Stall], top: int = 12) -> list[tuple[str, int, float, float]]:
    """(kind and what, with places' line numbers left out: count, total ms, max ms) by total."""
    groups: dict[str, list[float]] = {}
    for s in stalls:
        key = f"{s.kind}: {re.sub(r':[0-9]+', '', s.what)}"
        groups.setdefault(key, []).append(s.wall_ms)
    rows = [(k, len(v), round(sum(v), 1), max(v)) for k, v in groups.items()]
    return sorted(rows, key=lambda r: -r[2])[:top]


Site = tuple[object, CodeType | None, int]  # (a task's coroutine or a callback, code, line)


def _site(handle: asyncio.Handle) -> Site:
    """What the handle runs and where, kept unformatted (formatted only for a stall)."""
    callback = handle._callback  # type: ignore[attr-defined]
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        frame = _innermost(coro)
        return (coro, None, 0) if frame is None else (coro, frame.f_code, frame.f_lineno)
    return callback, None, 0


def _what(before: Site, handle: asyncio.Handle | None) -> str:
    """'task C from where its step resumed; then waits at where it next waited' (or done), or
    'callback F'."""
    runs, code, line = before
    if not isinstance(runs, (CoroutineType, GeneratorType)):
        return f"callback {getattr(runs, '__qualname__', repr(runs))}"
    text = f"task {_name(runs)} from {_place(code, line)}"
    if handle is None:
        return text
    task = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
    if isinstance(task, asyncio.Task) and task.done():
        return f"{text}; then task {_name(runs)} done"
    _, code, line = _site(handle)
    return f"{text}; then waits at {_place(code, line)}"


def _place(code: CodeType | None, line: int) -> str:
    return "?" if code is None else f"{code.co_qualname} {Path(code.co_filename).name}:{line}"


def _name(coro: object) -> str:
    return str(getattr(coro, "__qualname__", type(coro).__name__))


def _innermost(coro: object) -> FrameType | None:
    """Where the coroutine's chain of awaits ends: the innermost frame still suspended."""
    frame: FrameType | None = None
    seen = 0
    while coro is not None and seen < 64:
        seen += 1
        f = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if f is not None:
            frame = f
        if isinstance(coro, CoroutineType):
            coro = coro.cr_await
        elif isinstance(coro, GeneratorType):
            coro = coro.gi_yieldfrom
        else:
            break
    return frame
