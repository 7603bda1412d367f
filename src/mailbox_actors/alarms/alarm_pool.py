"""The real-time loop's workers (AL-3, AL-5): up to ``concurrency`` tasks that run due alarms, kept
while the loop runs and handed each alarm by resolving an idle worker's future.

Spawning a task in anyio's task group for every alarm that found no worker running (an alarm at a
time, as events and paced alarms come) cost about as much as the scheduler's own work for it; an
idle worker woken by ``Future.set_result`` costs one loop turn. The workers are the loop's task
group's, so a node stop cancels them as it cancels the loop (an alarm run cut at an ``await`` stays
stored and runs again: AL-3's at least once).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

import anyio.abc

from mailbox_actors.alarms.book import AlarmBook, Key

__all__ = ["AlarmPool"]

# Idle workers kept waiting for the next alarm; a worker that finds this many idle ends instead,
# so a burst at a large ``alarm_concurrency`` does not leave thousands of tasks behind.
_IDLE_KEPT = 32
# A worker running queued alarms back to back yields to the loop once this much time has passed
# (requests and other tasks then wait at most about this long, plus one alarm, for a turn).
_TURN_S = 0.002


class AlarmPool:
    """Workers draining the scheduler's queue of due keys (``hand_out`` adds to it)."""

    __slots__ = ("_concurrency", "_fire", "_idle", "_queue", "_running", "_tg", "_workers")

    def __init__(self, fire: Callable[[float, Callable[[], float]], Awaitable[None]],
                 tg: anyio.abc.TaskGroup,
                 concurrency: int, queue: deque[Key], running: set[Key]) -> None:
        self._fire = fire
        self._tg = tg
        self._concurrency = concurrency
        self._queue = queue
        self._running = running
        self._idle: list[asyncio.Future[None]] = []  # one per worker waiting for a key
        self._workers = 0  # started and not ended, idle ones included

    def hand_out(self, keys: list[Key]) -> None:
        """Queue due keys (in order) and get workers onto them: idle ones first, then new ones up
        to the concurrency."""
        queue = self._queue
        queue.extend(keys)
        self._running.update(keys)
        idle = self._idle
        waking = min(len(keys), len(idle))
        for _ in range(waking):
            woken = idle.pop()  # the most recently idle: its frames are still warm
            if not woken.done():
                woken.set_result(None)
        while self._workers < self._concurrency and self._workers - len(idle) < len(queue):
            self._workers += 1
            self._tg.start_soon(self._worker)

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        queue, idle, fire = self._queue, self._idle, self._fire
        clock = loop.time
        try:
            while True:
                while queue:
                    # Fires queued keys until none is left or the turn ends.
                    await fire(clock() + _TURN_S, clock)
                    if queue:
                        # Handlers that never suspend would otherwise hold the loop for the
                        # whole queue, starving requests, other workers and shutdown. (With
                        # none left, waiting for the next key below yields as well.) A burst
                        # runs a turn's worth of alarms between yields, not one: a loop turn
                        # per alarm was a tenth of an alarm on an open actor.
                        await asyncio.sleep(0)
                if len(idle) >= _IDLE_KEPT:
                    return
                woken = loop.create_future()
                idle.append(woken)
                try:
                    await woken
                except BaseException:
                    if woken in idle:
                        idle.remove(woken)
                    raise
        finally:
            self._workers -= 1

    def stop(self, book: AlarmBook) -> None:
        """The loop ended (its task group has ended every worker): keys queued and not yet
        fired go back to the book's heap, for a loop that starts again."""
        queue = self._queue
        while queue:
            key = queue.popleft()
            self._running.discard(key)
            e = book.entries.get(key)
            if e is not None:
                book.push(e.at, key)
        self._idle.clear()
