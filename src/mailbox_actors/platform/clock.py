"""Time for the whole runtime: ``Clock`` and its two implementations.

Nothing in mailbox-actors reads the system time except ``SystemClock``. ``FakeClock`` moves only when a
test advances it, and advancing it runs every alarm (and other timed work) that comes due, in time
order, before it returns: tests never sleep.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock", "TimedWork"]


@runtime_checkable
class Clock(Protocol):
    """Unix milliseconds. ``fake`` tells the runtime not to run its own timers."""

    @property
    def fake(self) -> bool: ...

    def now_ms(self) -> int: ...


class SystemClock:
    """The wall clock (``time.time_ns``), in Unix milliseconds."""

    fake = False

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class TimedWork(Protocol):
    """Something with due work that a ``FakeClock`` drives (the alarm scheduler, idle eviction)."""

    def next_due_ms(self) -> int | None: ...

    async def run_due(self, now_ms: int) -> None: ...


class FakeClock:
    """A clock that moves only when told to, firing due work at each step (like trio's MockClock).

    ``advance(ms)`` walks time forward to each due instant in order, runs what is due there, and
    finally stops at ``now + ms``. It refuses to go backwards.
    """

    fake = True

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        if start_ms < 0:
            raise ValueError("start_ms must be >= 0")
        self._now = start_ms
        self._work: list[TimedWork] = []

    def now_ms(self) -> int:
        return self._now

    def attach(self, work: TimedWork) -> None:
        """Register timed work for ``advance`` to drive (the runtime does this)."""
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

    async def advance(self, ms: int) -> None:
        """Move forward ``ms`` milliseconds, running all work that comes due on the way, in order."""
        if ms < 0:
            raise ValueError(f"FakeClock cannot go backwards (advance by {ms} ms)")
        target = self._now + ms
        while True:
            due = [d for w in self._work if (d := w.next_due_ms()) is not None and d <= target]
            if not due:
                break
            self._now = max(self._now, min(due))
            for work in list(self._work):
                await work.run_due(self._now)
        self._now = max(self._now, target)  # never backwards, even past a set_ms made meanwhile
        for work in list(self._work):
            await work.run_due(self._now)

    async def run_until_idle(self) -> None:
        """Run everything already due, without moving time."""
        await self.advance(0)
