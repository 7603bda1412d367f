"""The node's alarm scheduler (AL-1..AL-5): when each actor's one alarm fires, and its retries.

It fires due alarms of the node's ``AlarmBook`` through a small pool of workers, retries a failing
handler at 2, 4, 8... s (core.backoff) and abandons it after six retries. It never opens actor
files itself: its runner (the host) does that, and decides whether a wake was spurious.

On the system clock the workers live as long as the loop (``alarm_pool``): an alarm is handed to
an idle worker by resolving its future, where spawning a task in anyio's task group for each cost
more than the scheduler's own work. A ``FakeClock`` steps ``run_due`` instead, which fires each
instant's alarms in a task group of its own, in the book's order (RT-12).

**An alarm a commit made due runs at once.** The pool's turns keep a burst of alarms due at one
instant from starving requests; a request whose transaction leaves its actor's alarm due already
(its event appended to the outbox, which lowers the alarm to now) is not a burst, and its alarm is
run at once in a task of its own, outside the turns (``_run_soon``), as that request's own
follow-up; the book's entry stays the backstop. Under a steady request stream the turns open every
few rounds of the loop and an outbox run suspends at its publish, so a turn started about one run:
the outbox keys of a node queued behind each other (pop to fire p50 21-35 ms, p99 139-370 ms in
the PostgreSQL events figure's stage marks, session 18). A run started so that ends still due
(events emitted while it published) is run again at once, at most ``_SOON_CHAIN`` times in a row
(a handler that sets its alarm for now at every run goes back to the turns). Only while fewer
than ``concurrency`` keys run or wait in the pool (in a burst the turns hand out every alarm);
a failed run is retried by the book's schedule, never at once.
"""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from mailbox_actors.alarms.alarm_pool import AlarmPool
from mailbox_actors.alarms.book import AlarmBook, Entry, Key
from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.alarms.outcome import AlarmOutcome, AlarmResult
from mailbox_actors.core.backoff import ALARM_MAX_RETRIES, alarm_retry_delay_ms
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.rng import Rng

__all__ = ["HAND_OUT_AT_ONCE", "AlarmRunner", "AlarmScheduler"]

_LAZY_FLUSH_MS = 200
# The lazy index changes written in one piece of the loop's work at most (about 10 us of the loop
# thread each; the rest in the next piece, a loop round later): a burst's 200 ms of re-armed
# alarms were one transaction of 1.7 ms (CPU p50 in the quick burst figure), a request's wait.
# Pieces of 32 held the loop 0.28-0.45 ms (p50, burst windows, session 18): as long as an evicted
# actor's whole open, the longest piece a request waited for; 16 are about half (AlarmIndex.apply
# on 20,000 entries: 32 changes 0.16 ms p50, 16 0.10, 8 0.05; 5.0, 6.0 and 6.4 us a change, so
# about 1 us more an alarm than 32).
_FLUSH_AT_ONCE = 16
# Due keys the real-time loop hands to the pool a round of the loop. All at once, 100,000 due keys
# held the loop about 50 ms in one step (36 ms to take them from the book, then queueing; 20,000
# held it 30 ms at load); in pieces the first takes 10 ms (the heap split once), the others 0.4.
HAND_OUT_AT_ONCE = 1_000
# Heap entries that will not fire (moved since, or running) the real-time loop drops at most in
# one round before it looks for the next due time (``AlarmBook.drop_passed``): 256 are
# 0.13-0.32 ms (p50; 0.5-1.75 us each on heaps of 1,000-100,000 entries).
_DROP_AT_ONCE = 256
_MAX_ROUNDS = 10_000  # a handler that re-arms for "now" forever must not wedge advance()
_UNAVAILABLE_RETRY_MS = 64_000  # an actor file that cannot be opened: look again this much later
# Runs in a row an alarm a commit made due is run again at once when it ends still due (events
# emitted while it published); then the book's entry fires it (``AlarmScheduler._run_soon``).
_SOON_CHAIN = 8
# ``AlarmOutcome.DONE`` read as a global: Python 3.11's ``EnumType`` makes a member read by
# attribute the slow path (about 850 instructions), on every alarm's record.
_DONE = AlarmOutcome.DONE


class AlarmRunner(Protocol):
    """Who runs a wake (the host)."""

    async def fire_alarm(self, key: Key, retry_count: int, force: bool = False,
                         turn: Callable[[], Awaitable[None]] | None = None,
                         more_due: Callable[[], bool] | None = None) -> AlarmResult:
        """Run the key's wake the whole way. ``turn``: awaited after any wait outside the loop
        (an evicted actor's file opened in a thread), before the run's work on the loop goes
        on (the real-time loop's pool: its turns). ``more_due``: whether other due alarms wait
        for a worker when the run ends (a burst's rest)."""
        ...

    def abandon_alarm(self, key: Key, fired_ms: int | None) -> int | None:
        """After the last retry; returns the alarm stored after it."""
        ...

    def begin_alarm(self, key: Key, retry_count: int,
                    now_ms: int) -> StartedAlarm | AlarmResult | None:
        """Start the run of an open actor's due alarm at once, if nothing makes it wait; None:
        the wake goes through ``fire_alarm``. An ``AlarmResult``: the run is over already (it
        ended in its first step, its writes committed), and this is its outcome."""
        ...

    def end_alarm(self, started: Any, error: BaseException | None) -> AlarmResult:
        """After ``started.step`` (``error``: what it raised): what became of the alarm."""
        ...


class StartedAlarm(Protocol):
    """An alarm run ``begin_alarm`` started: its step is awaited by the scheduler's worker."""

    @property
    def step(self) -> Awaitable[object]: ...


class AlarmScheduler:
    def __init__(self, book: AlarmBook, runner: AlarmRunner, *, clock: Clock, rng: Rng,
                 concurrency: int, metrics: Any) -> None:
        self.book = book
        self._runner = runner
        self._clock = clock
        self._rng = rng
        self.concurrency = concurrency
        self._metrics = metrics
        self._log = get_logger("mailbox_actors.alarms")
        self._running: set[Key] = set()
        self._queue: deque[Key] = deque()
        self._workers = 0
        self._last_flush = 0
        self.fired = 0
        # Alarms fired whose ``alarms_fired_total`` is not yet added (``_report_fired``): a
        # burst's runs add theirs once a turn, per namespace, not once an alarm.
        self._unreported: dict[str, int] = {}
        self.retried = 0
        self.abandoned = 0
        self.lateness_ms: list[int] | None = None  # the benchmark collects here when set
        # What the real-time loop's pool measures its turns by (None: the loop's time); a test
        # makes a turn a number of alarms with it.
        self.turn_clock: Callable[[], float] | None = None
        # The real-time loop's pool's ``take_turn`` while it runs: what an alarm that waited
        # outside the loop awaits before going on (``AlarmRunner.fire_alarm``'s ``turn``).
        self._turn: Callable[[], Awaitable[None]] | None = None
        # While the real-time loop runs: its task group, for the runs a commit made due
        # (``_run_soon``), and their keys until their run was recorded (a run cancelled at a
        # stop, before its first step or within, is handed back to the book by ``_run``).
        self._soon_tg: anyio.abc.TaskGroup | None = None
        self._soon_keys: set[Key] = set()

    # ---- state -----------------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return self.book.pending_count

    @property
    def running_count(self) -> int:
        """Keys handed out (queued for a worker, or under way) and not yet recorded."""
        return len(self._running)

    def _more_due(self) -> bool:
        """Due alarms handed out wait for a worker (a burst's rest): the wakes' ``more_due``."""
        return bool(self._queue)

    def pending(self, key: Key) -> int | None:
        e = self.book.entries.get(key)
        return None if e is None else e.at

    def retry_count(self, key: Key) -> int:
        e = self.book.entries.get(key)
        return 0 if e is None else e.retry

    @property
    def index(self) -> AlarmIndex | None:
        """The durable index (once the node opened it)."""
        return self.book.index

    def flush_index(self) -> None:
        self.book.flush_index()

    # ---- firing ----------------------------------------------------------------------------

    def next_due_ms(self) -> int | None:
        return self.book.next_due_ms(self._running)

    def _pop_due(self, now: int, limit: int | None = None) -> list[Key]:
        return self.book.pop_due(now, self._running, limit)

    async def run_due(self, now_ms: int) -> None:
        """Fire everything due at ``now_ms`` and wait for it (FakeClock drives this)."""
        for _ in range(_MAX_ROUNDS):
            keys = self._pop_due(self._clock.now_ms())
            if not keys:
                break
            async with anyio.create_task_group() as tg:
                self._dispatch(keys, tg)
        self.book.flush_index()

    def _dispatch(self, keys: list[Key], tg: anyio.abc.TaskGroup) -> None:
        self._queue.extend(keys)
        self._running.update(keys)
        while self._workers < self.concurrency and self._workers < len(self._queue):
            self._workers += 1
            tg.start_soon(self._worker)

    async def _worker(self) -> None:
        try:
            while self._queue:
                await self._fire_queued(0.0, _over_now)  # one alarm
                # Handlers that never suspend would otherwise hold the loop for the whole queue,
                # starving requests, other workers and shutdown.
                await anyio.lowlevel.checkpoint()
        finally:
            self._workers -= 1

    async def _fire_queued(self, until: float, over: Callable[[float], bool]) -> bool:
        """Fire queued keys, one after another in this task, until none is left or ``over``
        says the turn that ends at ``until`` is (after the first); True: it stopped there, at a
        look that found the turn over (the pool's worker does not look again). An open actor's
        run is started and ended by the runner around its step, awaited here (``begin_alarm``):
        no coroutine, scope or task of its own beyond the handler's; any other wake goes the
        whole way (``_fire``). Each outcome is recorded once its run ended, so no alarm is
        acknowledged before its actor's transaction committed; ``alarms_fired_total`` hears of
        them at the end. A run over at once and done (a burst's usual alarm on an open actor:
        committed in its first step, re-armed) is recorded here (``_done``'s steps written out:
        a call, a tuple and the outcome's dispatch fewer an alarm)."""
        queue, book, runner, running = self._queue, self.book, self._runner, self._running
        entries, begin, dropped = book.entries, runner.begin_alarm, book.dropped
        unreported = self._unreported
        lateness = self.lateness_ms
        now_ms = self._clock.now_ms
        now = now_ms()
        try:
            while queue:
                key = queue.popleft()
                e = entries.get(key)
                started = None
                if e is not None:
                    retry, due = e.retry, e.at
                    # The run starts here: begin_alarm runs the handler's first step already.
                    began = 0 if lateness is None else now_ms()
                    try:
                        started = begin(key, retry, now)
                    except Exception as exc:  # a bug guard, as ``_fire``'s: a failed run, retried
                        running.discard(key)
                        self._log.error("alarm_fire_crashed", namespace=key[0], object_id=key[1],
                                        error=type(exc).__name__)
                        self._record(key, retry, due, AlarmResult(AlarmOutcome.FAILED, None), now)
                        if over(until):
                            return True
                        continue
                if started is None:
                    await self._fire(key, turn=self._turn, more_due=self._more_due)
                elif isinstance(started, AlarmResult):  # over already: committed, settled
                    running.discard(key)
                    if started[0] is _DONE:
                        # ``_record``'s success, written out (see there).
                        self.fired += 1
                        ns = key[0]
                        unreported[ns] = unreported.get(ns, 0) + 1
                        if lateness is not None:
                            lateness.append(began - due)
                        e = entries.get(key)
                        if e is None:
                            if key in dropped:
                                book.take_dropped(key, None)
                        else:
                            at = e.at
                            e.retry = 0
                            if (key in dropped and book.take_dropped(key, at)) or at == due:
                                book.push(at, key)
                            book.wake_if_before(at)
                    else:
                        self._record(key, retry, due, started, began)
                else:
                    try:
                        await started.step
                    except Exception as exc:
                        result = self._ended(key, started, exc)
                    except BaseException as exc:  # cancelled: the alarm stays stored, run again
                        self._ended(key, started, exc)
                        raise
                    else:
                        result = self._ended(key, started, None)
                    self._record(key, retry, due, result, began)
                if over(until):
                    return True
            return False
        finally:
            if unreported:  # once a turn, not once an alarm
                self._report_fired()

    def _ended(self, key: Key, started: StartedAlarm, error: BaseException | None) -> AlarmResult:
        try:
            return self._runner.end_alarm(started, error)
        except Exception as exc:  # the host reports failures as outcomes; this is a bug guard
            self._log.error("alarm_fire_crashed", namespace=key[0], object_id=key[1],
                            error=type(exc).__name__)
            return AlarmResult(AlarmOutcome.FAILED, None)
        finally:
            self._running.discard(key)

    def _run_soon(self, key: Key, chain: int = 0) -> None:
        """A commit left the key's alarm due now (``AlarmBook.on_due_now``): run it at once, in a
        task of its own, unless it runs already (its own run's commit, or a request's during it:
        the book's entry fires it after) or ``concurrency`` keys are running or queued already (a
        burst: the book's entry fires it as any other, in the pool's turns)."""
        tg = self._soon_tg
        running = self._running
        if tg is None or key in running or len(running) >= self.concurrency:
            return
        running.add(key)
        self._soon_keys.add(key)
        tg.start_soon(self._soon_fire, key, chain)

    async def _soon_fire(self, key: Key, chain: int) -> None:
        done = await self._fire(key)
        self._soon_keys.discard(key)  # not when cancelled: then ``_run`` hands it back
        e = self.book.entries.get(key)
        if done and chain < _SOON_CHAIN and e is not None and e.at <= self._clock.now_ms():
            self._run_soon(key, chain + 1)  # events emitted while it ran: publish them now too

    async def fire_now(self, key: Key) -> bool:
        """Run the key's alarm handler now, whatever its time (for tests); False if none ran."""
        if key in self._running:
            return False
        self._running.add(key)
        if key not in self.book.entries:
            self.book.put(key, self._clock.now_ms())
        before = self.fired + self.retried + self.abandoned
        await self._fire(key, force=True)
        return self.fired + self.retried + self.abandoned > before

    async def _fire(self, key: Key, force: bool = False,
                    turn: Callable[[], Awaitable[None]] | None = None,
                    more_due: Callable[[], bool] | None = None) -> bool:
        """Run the key's wake the whole way and record it; True: its run succeeded."""
        e = self.book.entries.get(key)
        if e is None:
            self._running.discard(key)
            return False
        retry, due = e.retry, e.at
        started = 0 if self.lateness_ms is None else self._clock.now_ms()
        try:
            result = await self._runner.fire_alarm(key, retry, force, turn, more_due)
        except Exception as exc:  # the host reports failures as outcomes; this is a bug guard
            self._log.error("alarm_fire_crashed", namespace=key[0], object_id=key[1],
                            error=type(exc).__name__)
            result = AlarmResult(AlarmOutcome.FAILED, None)
        finally:
            self._running.discard(key)
        self._record(key, retry, due, result, started)
        if self._unreported and turn is None:  # a queued key's (``turn``): at the run's end
            self._report_fired()
        return result[0] is _DONE

    def _record(self, key: Key, retry: int, due: int, result: AlarmResult, started: int) -> None:
        """What became of the key's run (it ran at ``started``, due at ``due`` after ``retry``
        failed runs): the book, the metrics and the retries hear of it."""
        outcome, stored = result
        lateness = self.lateness_ms
        book = self.book
        # The heap entry this run was popped from is gone, and so is any the loop met while the
        # key ran (``take_dropped``); a time set meanwhile was pushed when it was committed. So
        # a successful run pushes its key again only when it is still due as before, or when
        # the loop dropped its entry; every other outcome below pushes the key's time itself.
        e = book.entries.get(key)
        dropped = book.take_dropped(key, None if e is None else e.at)
        if outcome is _DONE:
            self.fired += 1
            unreported = self._unreported
            unreported[key[0]] = unreported.get(key[0], 0) + 1
            if lateness is not None:
                lateness.append(started - due)
            if e is not None:
                e.retry = 0
                if dropped or e.at == due:
                    book.push(e.at, key)
                book.wake_if_before(e.at)
            return
        elif outcome is AlarmOutcome.FAILED:
            self._retry(key, e, retry, stored)
        elif outcome is AlarmOutcome.REPLACED:  # workerd runs the queued alarm, not a retry
            self._metrics.inc("alarms_replaced_total", (("namespace", key[0]),))
            if stored is not None:
                book.put(key, stored, 0)
            else:
                book.forget(key)
        elif outcome is AlarmOutcome.UNAVAILABLE:
            # The actor's file cannot be opened now (no descriptors left, a newer schema): not
            # the handler failing, and the alarm is still stored. Try again, as long as it takes.
            at = self._clock.now_ms() + _UNAVAILABLE_RETRY_MS
            self._log.warning("alarm_actor_unavailable", namespace=key[0], object_id=key[1],
                              retry_in_ms=_UNAVAILABLE_RETRY_MS)
            book.put(key, at, 0 if e is None else e.retry)
        elif outcome is AlarmOutcome.MALFORMED:
            # A key that is no id (a damaged index row) names no file, now or later: dropped
            # from the book and the index, said once. Not the key itself: it is no id, and
            # could hold anything.
            self._log.warning("alarm_key_dropped", namespace=key[0], reason="not an id's form")
            self._metrics.inc("alarms_dropped_total", (("namespace", key[0]),))
            book.forget(key)
        elif outcome is AlarmOutcome.UNKNOWN:
            # This node does not serve the namespace (started without it): the index keeps the
            # alarm for a node that does.
            book.forget(key, keep_indexed=True)
        elif outcome in (AlarmOutcome.LATER, AlarmOutcome.BUSY) and stored is not None:
            book.put(key, stored, 0 if e is None else e.retry)
        else:  # gone: nothing stored any more
            book.forget(key)
        e = book.entries.get(key)
        if e is not None:
            # Due before the real-time loop looks again (it skipped this key while it ran): wake it.
            book.wake_if_before(e.at)

    def _report_fired(self) -> None:
        """Add the alarms fired since the last report to ``alarms_fired_total``."""
        unreported, self._unreported = self._unreported, {}
        for namespace, count in unreported.items():
            self._metrics.inc("alarms_fired_total", (("namespace", namespace),), count)

    def _retry(self, key: Key, e: Entry | None, retry: int, stored: int | None) -> None:
        nxt = retry + 1
        delay = alarm_retry_delay_ms(nxt, self._rng.random())
        if delay is None:
            self.abandoned += 1
            self._log.error("alarm_abandoned", namespace=key[0], object_id=key[1],
                            retries=ALARM_MAX_RETRIES)
            self._metrics.inc("alarms_abandoned_total", (("namespace", key[0]),))
            self.book.entries.pop(key, None)
            try:
                now_stored = self._runner.abandon_alarm(key, stored)
            except Exception as exc:
                # The alarm is still stored in the actor's file: keep it in the index, so the
                # next start schedules it again.
                self._log.error("alarm_abandon_failed", namespace=key[0], object_id=key[1],
                                error=type(exc).__name__)
                return
            if now_stored is None:
                self.book.forget(key)
            else:  # set meanwhile, or re-armed for purposes still pending: it stands
                self.book.committed(key, now_stored)
            return
        self.retried += 1
        self._metrics.inc("alarm_retries_total", (("namespace", key[0]),))
        self.book.put(key, self._clock.now_ms() + delay, nxt)

    # ---- the real-time loop ----------------------------------------------------------------

    async def run(self) -> None:
        """Fire alarms as they come due, forever (cancel the surrounding scope to stop).

        While it runs, what existed when it started (the modules, the book's entries, the node)
        is out of the collector's reach (``gc.freeze``): a full collection then walks only what
        came since, the open actors, so its pause (which every alarm due meanwhile waits out)
        no longer grows with the number of alarms or the code loaded. Nothing of it is lost:
        objects freed by reference count still are, and ``gc.unfreeze`` at stop hands the rest
        back to the collector."""
        gc.freeze()
        try:
            await self._run()
        finally:
            gc.unfreeze()

    async def _run(self) -> None:
        try:
            await self._run_loop()
        finally:
            # Runs a commit made due that the stop cancelled (before their first step or within):
            # their keys are not running, and fire from the book again (a loop started anew
            # finds them in its heap).
            for key in self._soon_keys:
                self._running.discard(key)
                e = self.book.entries.get(key)
                if e is not None:
                    self.book.push(e.at, key)
            self._soon_keys.clear()

    async def _run_loop(self) -> None:
        loop = asyncio.get_running_loop()
        book = self.book
        async with anyio.create_task_group() as tg:
            pool = AlarmPool(self._fire_queued, tg, self.concurrency, self._queue, self._running,
                             self.turn_clock)
            self._turn = pool.take_turn
            self._soon_tg = tg
            book.on_due_now = self._run_soon
            more = False  # lazy index changes left by the last piece written
            try:
                while True:
                    now = self._clock.now_ms()
                    # At most a piece of a burst a round of the loop: a request waits for one
                    # piece, not for 100,000 keys checked and queued in one step (50 ms).
                    keys = self._pop_due(now, HAND_OUT_AT_ONCE)
                    if keys:
                        pool.hand_out(keys)
                    if (book.has_lazy and (more or now - self._last_flush >= _LAZY_FLUSH_MS)
                            and now >= book.retry_flush_at):
                        # A piece of the index's writes is the pool's work too: in a turn, after
                        # whatever else waits for the loop (0.3 ms a piece during a burst).
                        await pool.take_turn()
                        self._last_flush = now
                        more = book.flush_index(_FLUSH_AT_ONCE)
                    else:
                        more = False
                    if book.drop_passed(self._running, _DROP_AT_ONCE):
                        wait_ms = 0  # entries that will not fire still on top: on next round
                    else:
                        nd = self.next_due_ms()
                        wait_ms = _LAZY_FLUSH_MS if nd is None else min(_LAZY_FLUSH_MS, nd - now)
                    if more:  # the rest of the lazy changes after one round of the loop
                        wait_ms = 0
                    if wait_ms <= 0:
                        await asyncio.sleep(0)
                        continue
                    # The clock says how long to wait; the wait is asyncio's own (a future and a
                    # timer), woken early by the book when an alarm comes due before it ends.
                    deadline = now + wait_ms
                    woken = loop.create_future()
                    timer = loop.call_later(self._clock.deadline_to_sleep_time(deadline),
                                            _resolve, woken)
                    book.sleeping(woken, deadline)
                    try:
                        await woken
                    finally:
                        timer.cancel()
                        book.awake()
            finally:
                self._turn = None
                self._soon_tg = None
                book.on_due_now = None
                pool.stop(book)


def _over_now(until: float) -> bool:
    """A turn of one alarm (the FakeClock's workers)."""
    return True


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
