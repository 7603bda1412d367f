"""Time for the whole runtime: ``Clock``, its two implementations, and how each one waits.

Nothing in mailbox-actors reads the system time except ``SystemClock``. The clock owns waiting, as a
trio ``Clock`` does with ``deadline_to_sleep_time``: code that waits for a moment asks the clock
(``sleep_until``) and code with timed work hands it to the clock (``loop_for``: the clock answers
with the loop to run, or steps the work itself), so nothing else asks which clock it has.
``FakeClock`` moves only when a test advances it, and advancing it runs every piece of timed work
(alarms, eviction, consumers) and wakes every sleeper that comes due, in time order, before it
returns: tests never sleep.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel

__all__ = ["Clock", "FakeClock", "Loop", "SystemClock", "TimedWork"]

Loop = Callable[[], Awaitable[None]]


class TimedWork(Protocol):
    """Work with due times (the alarm scheduler, idle eviction, a queue consumer): a real-time
    loop for the system clock, and its due time and one step for a ``FakeClock``."""

    def next_due_ms(self) -> int | None: ...

    async def run_due(self, now_ms: int) -> None: ...

    async def run(self) -> None: ...


@runtime_checkable
class Clock(Protocol):
    """Unix milliseconds, and the waiting that goes with them."""

    def now_ms(self) -> int: ...

    def deadline_to_sleep_time(self, deadline_ms: int) -> float:
        """Seconds of real time to sleep for this clock to reach ``deadline_ms``."""
        ...

    async def sleep_until(self, deadline_ms: int | None, wake: anyio.Event) -> None:
        """Return once the clock reaches ``deadline_ms`` (None: never) or ``wake`` is set; on
        return ``wake`` is set either way."""
        ...

    def loop_for(self, work: TimedWork) -> Loop | None:
        """Take on ``work``: the loop to run for it (until cancelled), or None when this clock
        steps the work itself."""
        ...

    def release(self, work: TimedWork) -> None:
        """The work's owner stops: the clock lets go of it."""
        ...


class SystemClock:
    """The wall clock (``time.time_ns``), in Unix milliseconds; timed work runs its own loop."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def deadline_to_sleep_time(self, deadline_ms: int) -> float:
        return max(0.0, (deadline_ms - self.now_ms()) / 1000)

    async def sleep_until(self, deadline_ms: int | None, wake: anyio.Event) -> None:
        delay = math.inf if deadline_ms is None else self.deadline_to_sleep_time(deadline_ms)
        with anyio.move_on_after(delay):
            await wake.wait()
        wake.set()

    def loop_for(self, work: TimedWork) -> Loop | None:
        return work.run

    def release(self, work: TimedWork) -> None:
        pass


class FakeClock:
    """A clock that moves only when told to, firing due work at each step (like trio's MockClock).

    ``advance(ms)`` walks time forward to each due instant in order, runs what is due there, and
    finally stops at ``now + ms``. It refuses to go backwards. Real time never passes for it
    (``deadline_to_sleep_time`` is infinite), so every sleeper waits for ``advance``.
    """

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        if start_ms < 0:
            raise ValueError("start_ms must be >= 0")
        self._now = start_ms
        self._work: list[TimedWork] = []
        self._sleepers: list[tuple[int, anyio.Event]] = []

    def now_ms(self) -> int:
        return self._now

    def deadline_to_sleep_time(self, deadline_ms: int) -> float:
        return 0.0 if deadline_ms <= self._now else math.inf

    async def sleep_until(self, deadline_ms: int | None, wake: anyio.Event) -> None:
        if deadline_ms is not None and deadline_ms <= self._now:
            wake.set()
            return
        entry = None if deadline_ms is None else (deadline_ms, wake)
        if entry is not None:
            self._sleepers.append(entry)
        try:
            await wake.wait()
        finally:
            if entry is not None and entry in self._sleepers:
                self._sleepers.remove(entry)

    def loop_for(self, work: TimedWork) -> Loop | None:
        """``advance`` steps the work; its real-time loop never runs."""
        self.attach(work)
        return None

    def release(self, work: TimedWork) -> None:
        self.detach(work)

    def attach(self, work: TimedWork) -> None:
        """Register timed work for ``advance`` to step (``loop_for`` does this for the node)."""
        if work not in self._work:
            self._work.append(work)

    def detach(self, work: TimedWork) -> None:
        if work in self._work:
            self._work.remove(work)

    def set_ms(self, now_ms: int) -> None:
        """Jump without running anything; for constructing scenarios such as a node that was down."""
        if now_ms < self._now:
            raise ValueError(f"FakeClock cannot go backwards ({now_ms} < {self._now})")
        self._now = now_ms

    def _next_due(self) -> list[int]:
        due = [d for w in self._work if (d := w.next_due_ms()) is not None]
        due.extend(d for d, ev in self._sleepers if not ev.is_set())
        return due

    async def _run_due(self) -> None:
        woken = [ev for d, ev in self._sleepers if d <= self._now]
        if woken:
            self._sleepers = [(d, ev) for d, ev in self._sleepers if d > self._now]
            for ev in woken:
                ev.set()
            await anyio.lowlevel.checkpoint()  # let the woken tasks answer
        for work in list(self._work):
            await work.run_due(self._now)

    async def advance(self, ms: int) -> None:
        """Move forward ``ms`` milliseconds, running all work that comes due on the way, in order."""
        if ms < 0:
            raise ValueError(f"FakeClock cannot go backwards (advance by {ms} ms)")
        target = self._now + ms
        while True:
            due = [d for d in self._next_due() if d <= target]
            if not due:
                break
            self._now = max(self._now, min(due))
            await self._run_due()
        self._now = max(self._now, target)  # never backwards, even past a set_ms made meanwhile
        await self._run_due()

    async def run_until_idle(self) -> None:
        """Run everything already due, without moving time."""
        await self.advance(0)
