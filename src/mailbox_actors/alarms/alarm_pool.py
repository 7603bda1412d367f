"""The real-time loop's workers (AL-3, AL-5): up to ``concurrency`` tasks that run due alarms, kept
while the loop runs and handed each alarm by resolving an idle worker's future.

Spawning a task in anyio's task group for every alarm that found no worker running (an alarm at a
time, as events and paced alarms come) cost about as much as the scheduler's own work for it; an
idle worker woken by ``Future.set_result`` costs one loop turn. The workers are the loop's task
group's, so a node stop cancels them as it cancels the loop (an alarm run cut at an ``await`` stays
stored and runs again: AL-3's at least once).

**Turns, shared by the whole pool.** A burst of due alarms must not starve requests (issue 28):
the pool as a whole runs alarms for at most one turn (``TURN_S`` of the loop thread's CPU) and then lets
the loop go round once (its I/O polled, its timers and every task already ready run) before the
next turn opens. A turn is the pool's, not a worker's: with a turn each, a request became ready
behind every worker's turn (32 of 2 ms: 64 ms a step of the request, measured 89 ms p99 against
0.27 ms idle). Within a turn one worker runs queued alarms back to back (a loop step per alarm
was a tenth of an alarm on an open actor); when it suspends inside an alarm (its actor's file
opened in a thread, a handler awaiting I/O), another worker goes on with the turn (``_check``),
so alarms that wait still overlap up to ``concurrency``. What a request waits for is one turn,
plus the ends of alarms that were suspended and resumed meanwhile (each finishes its run: an
alarm is never cut between its handler and its commit). Work the loop does besides alarms counts
against the turn it opened in, so requests come first and alarms still run at least one a turn.

**A turn opens two rounds of the loop after the last one ended.** The first round polls for I/O:
a request's bytes that arrived during the turn are read there, which wakes the request's task for
the round after. The turn opens in that next round, so its worker is woken behind the request,
whose step runs first. Opened one round after (the poll's own round), the worker's wake-up was
queued before the request's, and every request read during a turn waited a whole turn more: the
stream's median during a burst was 1.6 ms against 0.23 idle (issue 28, measured with
``node/loop_stalls.py``).

**The young generation is collected between turns** (``YOUNG_EVERY_S``): CPython starts a young
pass when allocations outnumber deallocations by 700, and in a burst on evicted actors every
activation's objects come as an eviction's go (freed by reference count), so the count stayed
near zero while 25,000-36,000 young objects piled up, and the pass that finally came held the loop
1-8 ms (gen 0) or 9-14 ms (gen 1). Collected every 10 ms of a burst instead, about a thousand are
walked at a time, a few tenths of a millisecond, outside any turn's time.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Awaitable, Callable

import anyio.abc

from mailbox_actors.alarms.book import AlarmBook, Key

__all__ = ["TURN_S", "YOUNG_EVERY_S", "AlarmPool"]

# Idle workers kept waiting for the next alarm; a worker that finds this many idle ends instead,
# so a burst at a large ``alarm_concurrency`` does not leave thousands of tasks behind.
_IDLE_KEPT = 32
# How long the pool runs alarms before the loop goes round once (requests wait about this long,
# plus the alarm under way, for the loop to look at them): this much of the loop thread's CPU, or
# _WALL_TURNS times as much of the clock's when the thread waits meanwhile (the machine gave the
# CPU to another process, the disk held a read). By CPU alone an alarm waiting for the disk would
# hold the turn; by the clock alone a loaded machine cut turns to an alarm or two, and the turn's
# cost, two rounds of the loop, grew to a tenth of a burst's alarms/s.
TURN_S = 0.0005
_WALL_TURNS = 4
# While turns open, the young generation is collected at a turn's opening at most this often.
YOUNG_EVERY_S = 0.01


class AlarmPool:
    """Workers draining the scheduler's queue of due keys (``hand_out`` adds to it), in turns the
    whole pool shares; ``clock`` measures the turns (by default the loop thread's CPU, or a
    quarter of the clock's time when that is more)."""

    __slots__ = ("_check_at", "_clock", "_concurrency", "_fire", "_idle", "_loop", "_next_turn",
                 "_queue", "_running", "_starting", "_tg", "_turn_ends", "_waiting", "_workers",
                 "_young_at")

    def __init__(self, fire: Callable[[float, Callable[[], float]], Awaitable[None]],
                 tg: anyio.abc.TaskGroup,
                 concurrency: int, queue: deque[Key], running: set[Key],
                 clock: Callable[[], float] | None = None) -> None:
        self._fire = fire
        self._tg = tg
        self._concurrency = concurrency
        self._queue = queue
        self._running = running
        self._loop = asyncio.get_running_loop()
        self._clock = _turn_clock(self._loop) if clock is None else clock
        self._idle: list[asyncio.Future[None]] = []  # one per worker waiting for a key
        self._starting: set[asyncio.Task[None]] = set()  # workers asked for by a loop callback
        self._waiting: deque[asyncio.Future[None]] = deque()  # workers waiting for a turn
        self._workers = 0  # started and not ended, idle and waiting ones included
        self._turn_ends = 0.0  # the current turn's end (by ``clock``); past: no turn open
        self._next_turn: asyncio.Handle | None = None  # the next turn's opening (or the poll's
        # round before it), once scheduled
        self._check_at: asyncio.Handle | None = None  # a look after the running worker's step
        self._young_at = 0.0  # the loop's time of the next young collection (at a turn's opening)

    def hand_out(self, keys: list[Key]) -> None:
        """Queue due keys (in order) and get a worker onto them (the turn's own ``_check`` adds
        more while the ones running wait inside their alarms)."""
        self._queue.extend(keys)
        self._running.update(keys)
        self._more()

    def _more(self) -> bool:
        """Get one more worker going: an idle one, else a new one up to the concurrency; a look
        (``_check``) follows its step. False: every worker is running or waits for a turn."""
        idle = self._idle
        while idle:
            woken = idle.pop()  # the most recently idle: its frames are still warm
            if not woken.done():
                woken.set_result(None)
                break
        else:
            if self._workers >= self._concurrency:
                return False
            self._workers += 1
            if asyncio.current_task(self._loop) is None:
                # A loop callback (``_check``, ``_open_turn``): anyio tells its backend by the
                # running task (under a plain ``asyncio.run`` there is no other sign), so the
                # worker is started from a task of its own.
                starter = self._loop.create_task(self._start_worker())
                self._starting.add(starter)
                starter.add_done_callback(self._starting.discard)
            else:
                self._tg.start_soon(self._worker)
        self._look()
        return True

    async def _start_worker(self) -> None:
        try:
            self._tg.start_soon(self._worker)
        except RuntimeError:  # the loop's task group ended meanwhile (a node stopping)
            self._workers -= 1

    def _look(self) -> None:
        if self._check_at is None:
            self._check_at = self._loop.call_soon(self._check)

    def _check(self) -> None:
        """After the steps of the workers just woken: if the turn is still open with keys queued,
        every worker that ran it is waiting inside an alarm; one more takes the turn on."""
        self._check_at = None
        if not self._queue:
            self._release_waiting()
        elif self._clock() < self._turn_ends and not self._hand_turn():
            self._more()

    def _after_poll(self) -> None:
        """One round of the loop since the last turn ended, its I/O polled: the tasks that it
        woke (a request's, its bytes read) run in the next round, and the turn opens there
        behind them."""
        self._next_turn = self._loop.call_soon(self._open_turn)

    def _open_turn(self) -> None:
        """The loop went round since the last turn ended: a new one, for the first waiting
        worker, woken whatever the time now (it runs one alarm at least: a check of the clock
        here could find the turn over already on a loaded machine, and wake nobody, for good).
        Whatever else the loop runs from here counts against the turn."""
        self._next_turn = None
        if not self._queue:
            self._release_waiting()
            return
        now = self._loop.time()
        if now >= self._young_at:
            self._young_at = now + YOUNG_EVERY_S
            gc.collect(0)
        self._turn_ends = self._clock() + TURN_S
        if not self._hand_turn():
            self._more()

    def _hand_turn(self) -> bool:
        """Wake the first worker waiting for a turn (a look follows its step); False: none."""
        waiting = self._waiting
        while waiting:
            woken = waiting.popleft()
            if not woken.done():
                woken.set_result(None)
                self._look()
                return True
        return False

    def _release_waiting(self) -> None:
        """The queue is drained: workers waiting for a turn wait for keys instead."""
        waiting = self._waiting
        while waiting:
            woken = waiting.popleft()
            if not woken.done():
                woken.set_result(None)

    async def _wait_turn(self) -> None:
        woken = self._loop.create_future()
        self._waiting.append(woken)
        if self._next_turn is None:
            self._next_turn = self._loop.call_soon(self._after_poll)
        try:
            await woken
        except BaseException:
            if woken in self._waiting:
                self._waiting.remove(woken)
            raise

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        queue, idle, fire, clock = self._queue, self._idle, self._fire, self._clock
        try:
            while True:
                while queue:
                    ends = self._turn_ends
                    if clock() < ends:
                        # Queued keys until none is left or the turn ends (at least one: a
                        # worker that resumes inside an alarm finishes it whatever the time).
                        # If it waits inside one with the turn still open, the look after its
                        # step gets another worker onto the turn.
                        self._look()
                        await fire(ends, clock)
                    else:
                        await self._wait_turn()
                        if queue:  # this worker's turn: one alarm at least, even if the
                            # loop's other work (or a loaded machine) used the turn up
                            await fire(self._turn_ends, clock)
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
        for handle in (self._next_turn, self._check_at):
            if handle is not None:
                handle.cancel()
        for starter in self._starting:
            starter.cancel()
        self._next_turn = self._check_at = None
        self._idle.clear()
        self._waiting.clear()


def _turn_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """Seconds of the loop thread's CPU since now, or of the loop's clock over ``_WALL_TURNS``
    when that is more (the thread waited meanwhile)."""
    wall0, cpu0, thread_time = loop.time(), time.thread_time(), time.thread_time
    wall = loop.time

    def clock() -> float:
        return max((wall() - wall0) / _WALL_TURNS, thread_time() - cpu0)

    return clock

