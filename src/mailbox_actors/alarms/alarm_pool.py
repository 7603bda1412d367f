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
so alarms that wait still overlap up to ``concurrency``; a turn that ends with keys queued and
every worker under way waiting inside its alarm has the next turn start one more (session 16:
before, handlers awaiting another service held the pool at what one turn had started, 7 of 32
in the review's probe, until one returned). What a request waits for is the alarm
under way when it arrived (an alarm is never cut between its handler and its commit; see
"Requests first"). Work the loop does besides alarms counts against the turn it opened in, and
alarms still run at least one a turn.

**A turn opens two rounds of the loop after the last one ended.** The first round polls for I/O:
a request's bytes that arrived during the turn are read there, which wakes the request's task for
the round after. The turn opens in that next round, so its worker is woken behind the request,
whose step runs first. Opened one round after (the poll's own round), the worker's wake-up was
queued before the request's, and every request read during a turn waited a whole turn more: the
stream's median during a burst was 1.6 ms against 0.23 idle (issue 28, measured with
``node/loop_stalls.py``).

**Requests first.** Between two alarms of a turn the pool looks whether anything else waits for
the loop (``_others_ready``: a handle ready besides its own look, a timer due, a descriptor ready
besides the loop's self-pipe); if so the turn is over there, whatever its time left, and the next
turn's opening waits, a round at a time, until nothing else is ready (or the loop's other work
has used a turn's time since: alarms are never starved either). An alarm that waited outside the
loop (an evicted actor's file opened in a thread) takes a turn before its activation
(``take_turn``, the runner's ``turn``): opens finishing together used to resume together, in one
round ahead of a request (5-25 activations, up to 10 ms, measured). The look reads the loop's
private queues, asyncio's or uvloop's (``_others_ready``); on any other loop turns end by the
clock alone. On uvloop the rounds fall the same way: libuv polls after the round's ready
handles, and a request's bytes read there wake its task behind the poll's round (``_after_poll``),
ahead of the turn's opening a round later.

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
import os
import select
import selectors
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import anyio.abc

from mailbox_actors.alarms.book import AlarmBook, Key

__all__ = ["TURN_S", "YOUNG_EVERY_S", "AlarmPool"]

# Idle workers kept waiting for the next alarm; a worker that finds this many idle ends instead,
# so a burst at a large ``alarm_concurrency`` does not leave thousands of tasks behind.
_IDLE_KEPT = 32
# How long the pool runs alarms before the loop goes round once when nothing else waits for it:
# this much of the loop thread's CPU, or _WALL_TURNS times as much of the clock's when the thread
# waits meanwhile (the machine gave the CPU to another process, the disk held a read). By CPU alone
# an alarm waiting for the disk would hold the turn; by the clock alone a loaded machine cut turns
# to an alarm or two, and the turn's cost, two rounds of the loop, grew to a tenth of a burst's
# alarms/s. A request does not wait for the turn's end: the look between two pieces of the
# pool's work ends the turn as soon as anything else is ready ("Requests first"); what waits for
# it is what the look cannot see (uvloop's timers). 2 ms, not 0.5 (session 19): an evicted
# actor's alarm is about 0.5 ms of the loop, so a turn ended about once an alarm (1.06, counted at
# real speed; 0.38 at 2 ms), each end two rounds of the loop and a worker's wait for the next
# turn, which no request was waiting for.
TURN_S = 0.002
_WALL_TURNS = 4
# While turns open, the young generation is collected at a turn's opening at most this often.
YOUNG_EVERY_S = 0.01


class AlarmPool:
    """Workers draining the scheduler's queue of due keys (``hand_out`` adds to it), in turns the
    whole pool shares; ``clock`` measures the turns (by default the loop thread's CPU, or a
    quarter of the clock's time when that is more)."""

    __slots__ = ("_check_at", "_clock", "_close_look", "_concurrency", "_ended_at", "_fire",
                 "_idle", "_look_parts", "_loop", "_next_turn", "_others_ready", "_over", "_queue",
                 "_resuming",
                 "_running", "_starting", "_tg", "_turn_ends", "_waiting", "_workers",
                 "_young_at")

    def __init__(self, fire: Callable[[float, Callable[[float], bool]], Awaitable[bool]],
                 tg: anyio.abc.TaskGroup,
                 concurrency: int, queue: deque[Key], running: set[Key],
                 clock: Callable[[], float] | None = None) -> None:
        self._fire = fire
        self._tg = tg
        self._concurrency = concurrency
        self._queue = queue
        self._running = running
        self._loop = asyncio.get_running_loop()
        reached: Callable[[float], bool]
        if clock is None:
            self._clock, reached = _turn_clock(self._loop)
        else:
            self._clock = clock

            def reached(until: float) -> bool:
                return clock() >= until
        self._idle: list[asyncio.Future[None]] = []  # one per worker waiting for a key
        self._starting: set[asyncio.Task[None]] = set()  # workers asked for by a loop callback
        # Workers waiting for a turn, each woken with True for a turn just opened (it runs one
        # alarm at least), False to take an open turn on if it still is, or to go idle.
        self._waiting: deque[asyncio.Future[bool]] = deque()
        # Alarms that waited outside the loop (a file opened in a thread), waiting for a turn to
        # go on: handed the turn before the workers that would start new ones.
        self._resuming: deque[asyncio.Future[bool]] = deque()
        self._workers = 0  # started and not ended, idle and waiting ones included
        self._turn_ends = 0.0  # the current turn's end (by ``clock``); past: no turn open
        self._next_turn: asyncio.Handle | None = None  # the next turn's opening (or the poll's
        # round before it), once scheduled
        self._check_at: asyncio.Handle | None = None  # a look after the running worker's step
        self._young_at = 0.0  # the loop's time of the next young collection (at a turn's opening)
        self._ended_at = 0.0  # ``clock`` when the last turn ended (the loop's round began)
        look = _others_ready(self._loop, self)
        self._others_ready: Callable[[], bool] | None = None if look is None else look[0]
        self._close_look = _nothing if look is None else look[1]
        # The look's pieces, read in one call with the clock between alarms, when the clock is
        # the pool's own (a test's clock, or a look of another kind, goes through the calls).
        self._look_parts = look[2] if look is not None and clock is None else None
        self._over = _over(self, reached)

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

    def _room(self) -> bool:
        """Whether ``_more`` could get one more worker going (an idle one, or a new one)."""
        return self._workers < self._concurrency or any(not w.done() for w in self._idle)

    async def _start_worker(self) -> None:
        try:
            self._tg.start_soon(self._worker)
        except RuntimeError:  # the loop's task group ended meanwhile (a node stopping)
            self._workers -= 1

    def _look(self) -> None:
        if self._check_at is None:
            self._check_at = self._loop.call_soon(self._check)

    def _check(self) -> None:
        """After the steps of the workers just woken: if the turn is still open, every worker
        that ran it is done or waiting inside an alarm; an alarm waiting to resume, or one more
        worker for the keys queued, takes the turn on. If it is over with alarms waiting for
        the next, that one is on its way."""
        self._check_at = None
        if not self._queue:
            self._release_waiting()
        if not self._over(self._turn_ends):
            if not self._hand_turn() and self._queue:
                self._more()
        elif (self._resuming or self._waiting or (self._queue and self._room())) \
                and self._next_turn is None:
            # Keys queued with no worker waiting for a turn: the workers under way all wait
            # inside their alarms (a handler awaiting another service). The next turn gets
            # one more going; else the pool stayed at what one turn started until a handler
            # returned.
            self._next_turn = self._loop.call_soon(self._after_poll)

    def _after_poll(self) -> None:
        """One round of the loop since the last turn ended, its I/O polled: the tasks that it
        woke (a request's, its bytes read) run in the next round, and the turn opens there
        behind them. Not here, even when the look finds nothing else waiting: bytes that
        arrive just after it were then read only after a whole turn (session 23: the request
        p99 in burst windows read 4.60/2.84x with the turn opened here when nothing waited,
        3.67/2.33x without, two rounds a side; the end run 6.77x)."""
        self._ended_at = self._clock()
        self._next_turn = self._loop.call_soon(self._open_turn)

    def _open_turn(self) -> None:
        """The loop went round since the last turn ended: a new one, for the first alarm waiting
        to resume or the first waiting worker, woken whatever the time now (it runs one alarm at
        least: a check of the clock here could find the turn over already on a loaded machine,
        and wake nobody, for good). While anything else is ready to run, the opening waits a
        round more (requests first), for at most a turn's time of the clock; whatever else the
        loop runs from here counts against the turn."""
        self._next_turn = None
        if not self._queue:
            self._release_waiting()
            if not self._resuming:
                return
        others = self._others_ready
        if others is not None and others() and self._clock() < self._ended_at + TURN_S:
            self._next_turn = self._loop.call_soon(self._open_turn)
            return
        now = self._loop.time()
        if now >= self._young_at:
            self._young_at = now + YOUNG_EVERY_S
            gc.collect(0)
        self._turn_ends = self._clock() + TURN_S
        if not self._hand_turn(True) and self._queue:
            self._more()

    def _hand_turn(self, opened: bool = False) -> bool:
        """Wake the first alarm waiting to resume, else the first worker waiting for a turn (a
        look follows its step), told whether the turn was ``opened`` for it; False: none."""
        for waiting in (self._resuming, self._waiting):
            while waiting:
                woken = waiting.popleft()
                if not woken.done():
                    woken.set_result(opened)
                    self._look()
                    return True
        return False

    def _release_waiting(self) -> None:
        """The queue is drained: workers waiting for a turn wait for keys instead."""
        waiting = self._waiting
        while waiting:
            woken = waiting.popleft()
            if not woken.done():
                woken.set_result(False)

    async def take_turn(self) -> None:
        """Called by an alarm that waited outside the loop (its actor's file opened in a thread)
        before it goes on with its work on the loop: it waits for a turn, unless one is open and
        nothing else waits for the loop. Without it, every alarm whose open had finished ran on
        in one round of the loop, a request behind them all (5-25 activations, up to 10 ms)."""
        while self._over(self._turn_ends):
            if await self._wait_turn(self._resuming):
                return

    async def _wait_turn(self, waiting: deque[asyncio.Future[bool]] | None = None) -> bool:
        """Wait in ``waiting`` (the workers', by default) until woken; True: for a turn just
        opened."""
        if waiting is None:
            waiting = self._waiting
        woken: asyncio.Future[bool] = self._loop.create_future()
        waiting.append(woken)
        if self._next_turn is None:
            self._next_turn = self._loop.call_soon(self._after_poll)
        try:
            return await woken
        except BaseException:
            if woken in waiting:
                waiting.remove(woken)
            raise

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        queue, idle, fire, over_at = self._queue, self._idle, self._fire, self._over
        try:
            while True:
                over = False  # ``fire`` ended at a look that found the turn over
                while queue:
                    ends = self._turn_ends
                    if not over and not over_at(ends):
                        # Queued keys until none is left or the turn ends (at least one: a
                        # worker that resumes inside an alarm finishes it whatever the time).
                        # If it waits inside one with the turn still open, the look after its
                        # step gets another worker onto the turn. ``fire`` looks at the clock
                        # against the ``ends`` it was given: if it waited inside an alarm while
                        # that turn ended and the next opened for another worker, it finds its
                        # own turn over (unless requests ended that turn early, before its time)
                        # and waits for a turn of its own rather than taking the open one on,
                        # which leaves the loop to requests sooner (review O5, session 17).
                        self._look()
                        over = await fire(ends, over_at)
                    else:
                        # Over: no look again (fire's was the last thing this task did, and
                        # time and what waits for the loop only grow meanwhile).
                        over = False
                        if await self._wait_turn() and queue:
                            # A turn opened for this worker: one alarm at least, even if the
                            # loop's other work (or a loaded machine) used the turn up. (Handed
                            # an open turn on, it looks at the clock first, as above.)
                            over = await fire(self._turn_ends, over_at)
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
        self._others_ready = None  # turns end by the clock from here (workers being cancelled)
        self._close_look()
        self._idle.clear()
        self._waiting.clear()
        self._resuming.clear()


def _turn_clock(loop: asyncio.AbstractEventLoop,
                ) -> tuple[Callable[[], float], Callable[[float], bool]]:
    """Seconds of the loop thread's CPU since now, or of the loop's clock over ``_WALL_TURNS``
    when that is more (the thread waited meanwhile); and whether that clock reached a time.
    The second reads the thread's CPU (a system call, not the vDSO's: about 0.45 us, at every
    look between two alarms before) only once the real time says it could have reached it: a
    thread's CPU time never runs ahead of the real time, so the CPU part now is at most its
    value at the last read plus the real time since, and until that bound reaches ``until``
    the CPU part has not (at a turn's opening the pool reads the clock, so in a turn the call
    is made only in its last stretch, about once a turn when nothing else runs)."""
    thread_time = time.thread_time
    wall = _loop_time(loop)
    real = time.monotonic
    wall0, cpu0 = wall(), thread_time()
    real_is_wall = wall is real
    last_value, last_real = 0.0, real()  # the clock's last reading, and the real time before it

    def clock() -> float:
        nonlocal last_value, last_real
        at = real()
        value = max((wall() - wall0) / _WALL_TURNS, thread_time() - cpu0)
        last_value, last_real = value, at
        return value

    def reached(until: float) -> bool:
        now = real()
        if last_value + (now - last_real) < until and (
                (now if real_is_wall else wall()) - wall0) / _WALL_TURNS < until:
            return False
        return clock() >= until

    return clock, reached


def _loop_time(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """The loop's clock: ``time.monotonic`` itself where the loop's ``time`` is asyncio's (which
    returns it: a Python call less at every read), else the loop's own (uvloop's: libuv's time,
    read at the start of the loop's round)."""
    if type(loop).time is asyncio.BaseEventLoop.time:
        return time.monotonic
    return loop.time


def _over(pool: AlarmPool, reached: Callable[[float], bool]) -> Callable[[float], bool]:
    """Whether the turn that ends at ``until`` is over: anything else waits for the loop (the
    pool's look, ``AlarmPool._others_ready``: requests first), or the turn's clock reached it.
    Read after every alarm of a turn: where the look is a known loop's, the look's pieces are
    read here in one call (four calls of the look and three of the clock an alarm before)."""
    look = pool._look_parts

    if look is None:
        def over(until: float) -> bool:
            others = pool._others_ready
            return (others is not None and others()) or reached(until)
        return over

    ready, timers, now, poll, most, own_fds, own_on_sight = look

    def over_fused(until: float) -> bool:
        if pool._others_ready is not None:  # None once the pool stopped: the clock alone
            n = len(ready)
            if n > 1 or (n == 1 and ready[0] is not pool._check_at):
                return True
            if timers and timers[0].when() <= now():
                return True
            for fd, _ in poll(0, most):
                if fd not in own_fds and (own_on_sight is None or not own_on_sight(fd)):
                    return True
        return reached(until)

    return over_fused


class _Look(NamedTuple):
    """What the pool reads to see whether anything else waits for the loop: its queue of ready
    handles, whether a timer is due, and whether a descriptor is ready (other than the loop's
    own wake-up by threads); ``close`` lets go of what the look holds open. ``parts``: the
    same read in pieces, for the pool's one-call look between alarms (``_over``), where the
    descriptors are an epoll set."""

    ready: deque[object]
    timer_due: Callable[[], bool]
    io_ready: Callable[[], bool]
    close: Callable[[], None]
    parts: _LookParts | None = None


class _LookParts(NamedTuple):
    """The look's pieces (``_Look.parts``): the ready queue; the loop's timers (empty where they
    cannot be seen) and its clock; the epoll set's zero-timeout ``poll`` and how many events to
    take; the loop's own descriptors, and what tells one on sight (or None)."""

    ready: deque[object]
    timers: list[asyncio.TimerHandle]
    now: Callable[[], float]
    poll: Callable[[float, int], list[tuple[int, int]]]
    most: int
    own_fds: frozenset[int]
    own_on_sight: Callable[[int], bool] | None


def _others_ready(loop: asyncio.AbstractEventLoop, pool: AlarmPool,
                  ) -> tuple[Callable[[], bool], Callable[[], None], _LookParts | None] | None:
    """Whether anything but the pool waits for the loop to run it: a handle ready (the pool's
    own look aside), a timer due, or a descriptor ready to read or write (the loop's wake-up by
    threads aside: what a thread hands back is in the ready queue already); how to close
    the look; and its pieces, for the pool's look between alarms (``_over``). None where the
    loop is neither asyncio's selector loop nor uvloop's, or does not look as expected: turns
    then end by the clock alone."""
    look = _asyncio_look(loop) or _uvloop_look(loop)
    if look is None:
        return None
    ready, timer_due, io_ready = look.ready, look.timer_due, look.io_ready

    def others_ready() -> bool:
        n = len(ready)
        if n > 1 or (n == 1 and ready[0] is not pool._check_at):
            return True
        return timer_due() or io_ready()

    return others_ready, look.close, look.parts


def _asyncio_look(loop: asyncio.AbstractEventLoop) -> _Look | None:
    """asyncio's selector loop: its private ``_ready``, ``_scheduled``, ``_selector`` and
    ``_ssock`` (Python 3.11), each checked here once; the selector is polled with a zero
    timeout, which consumes nothing (asyncio registers level-triggered)."""
    ready = getattr(loop, "_ready", None)
    timers = getattr(loop, "_scheduled", None)
    selector = getattr(loop, "_selector", None)
    ssock: socket.socket | None = getattr(loop, "_ssock", None)
    if (not isinstance(ready, deque) or not isinstance(timers, list)
            or not isinstance(selector, selectors.BaseSelector)):
        return None
    own_fd = ssock.fileno() if isinstance(ssock, socket.socket) else -1
    epoll = getattr(selector, "_selector", None)
    now = _loop_time(loop)

    def timer_due() -> bool:
        return bool(timers) and timers[0].when() <= now()

    io_ready: Callable[[], bool]
    parts = None
    if isinstance(selector, selectors.EpollSelector) and isinstance(epoll, select.epoll):
        own_fds = frozenset((own_fd,))
        io_ready = _epoll_ready(epoll, own_fds)
        parts = _LookParts(ready, timers, now, epoll.poll, len(own_fds) + _MORE_EVENTS, own_fds,
                           None)
    else:
        peek = selector.select

        def io_ready() -> bool:
            return any(key.fd != own_fd for key, _ in peek(0))

    return _Look(ready, timer_due, io_ready, _nothing, parts)


def _uvloop_look(loop: asyncio.AbstractEventLoop) -> _Look | None:
    """uvloop's loop (Linux): its ready queue is a private field of the compiled loop, found as
    the one deque among the loop's references (``gc.get_referents``) and checked to be the
    queue by a handle scheduled into it; the descriptors by libuv's epoll set
    (``_get_backend_id``), polled through a duplicate with a zero timeout, which consumes nothing
    because libuv registers level-triggered (checked here in the set's ``/proc`` listing: a
    registration edge-triggered or one-shot, and there is no look). The loop's wake-up by
    threads, libuv's eventfd, is left aside as asyncio's self-pipe is. Timers are libuv's and
    cannot be seen: a due one runs at the start of the loop's next round, after the turn under
    way."""
    backend = getattr(loop, "_get_backend_id", None)
    if backend is None or not hasattr(select, "epoll"):
        return None
    queues = [ref for ref in gc.get_referents(loop) if type(ref) is deque]
    if len(queues) != 1:
        return None
    ready: deque[object] = queues[0]
    probe = loop.call_soon(_nothing)
    probe.cancel()
    if not ready or ready[-1] is not probe:
        return None
    epfd = backend()
    registered = _epoll_registrations(epfd)
    if registered is None or any(events & _NOT_LEVEL for events in registered.values()):
        return None
    # libuv adds a descriptor to the set at its next poll: a pool made in the loop's first
    # round finds the wake-up's eventfd not there yet, so one ready later is told on sight.
    wake_fds = frozenset(fd for fd in registered if _is_eventfd(fd))
    epoll = select.epoll.fromfd(os.dup(epfd))
    parts = _LookParts(ready, [], loop.time, epoll.poll, len(wake_fds) + _MORE_EVENTS, wake_fds,
                       _is_eventfd)
    return _Look(ready, _never, _epoll_ready(epoll, wake_fds, _is_eventfd), epoll.close, parts)


# Events a look takes from the epoll set beyond the loop's own descriptors: one of them is another's.
_MORE_EVENTS = 4
# Flags that would make a look at the epoll set consume what it sees.
_NOT_LEVEL = getattr(select, "EPOLLET", 1 << 31) | getattr(select, "EPOLLONESHOT", 1 << 30)


def _epoll_registrations(epfd: int) -> dict[int, int] | None:
    """The descriptors in the epoll set ``epfd`` and their registered events (Linux's
    ``/proc/self/fdinfo``), or None where that cannot be read."""
    try:
        with open(f"/proc/self/fdinfo/{epfd}") as f:
            lines = [line.split() for line in f if line.startswith("tfd:")]
        return {int(parts[1]): int(parts[3], 16) for parts in lines}
    except (OSError, ValueError, IndexError):
        return None


def _is_eventfd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
    except OSError:
        return False


def _epoll_ready(epoll: select.epoll, own_fds: frozenset[int],
                 own_on_sight: Callable[[int], bool] | None = None) -> Callable[[], bool]:
    """Whether a descriptor in ``epoll`` besides the loop's own is ready: a zero-timeout poll.
    The loop's own are ``own_fds`` and those ``own_on_sight`` says are (asked only of a
    descriptor found ready, so only when something is)."""
    poll = epoll.poll
    most = len(own_fds) + _MORE_EVENTS

    def io_ready() -> bool:
        for fd, _ in poll(0, most):
            if fd not in own_fds and (own_on_sight is None or not own_on_sight(fd)):
                return True
        return False

    return io_ready


def _never() -> bool:
    return False


def _nothing() -> None:
    pass
