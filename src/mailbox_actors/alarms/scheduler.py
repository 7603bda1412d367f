"""The node's alarm scheduler (AL-1..AL-5): when each actor's one alarm fires, and its retries.

It keeps every pending alarm of the node in a heap (evicted actors included), fires due ones through
a small pool of workers, retries a failing handler at 2, 4, 8... s (core.backoff) and abandons it
after six retries. Alarm times reach the durable index early-or-never-late (see ``AlarmIndex``). It
never opens actor files itself: the host does that, and decides whether a wake was spurious.
"""

from __future__ import annotations

import heapq
import itertools
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import structlog

from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.core.backoff import ALARM_MAX_RETRIES, alarm_retry_delay_ms
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.rng import Rng
from mailbox_actors.platform.storage.types import StorageWriteFailed

__all__ = ["AlarmScheduler"]

Key = tuple[str, str]
FireFn = Callable[[Key, int, bool], Awaitable[tuple[str, int | None]]]
AbandonFn = Callable[[Key, int | None], int | None]  # -> the alarm stored after it

_LAZY_FLUSH_MS = 200
_INDEX_RETRY_MS = 5_000  # a flush the disk refused is tried again this much later
_MAX_ROUNDS = 10_000  # a handler that re-arms for "now" forever must not wedge advance()
_UNAVAILABLE_RETRY_MS = 64_000  # an actor file that cannot be opened: look again this much later


class _Entry:
    __slots__ = ("at", "retry")

    def __init__(self, at: int, retry: int = 0) -> None:
        self.at = at
        self.retry = retry


class _Sink:
    """What one actor's storage calls when its alarm changes (``platform.sql.AlarmSink``)."""

    __slots__ = ("_key", "_sched")

    def __init__(self, sched: AlarmScheduler, key: Key) -> None:
        self._sched = sched
        self._key = key

    def before_commit(self, at_ms: int) -> None:
        self._sched._before_commit(self._key, at_ms)

    def committed(self, at_ms: int | None) -> None:
        self._sched._committed(self._key, at_ms)


class AlarmScheduler:
    def __init__(self, index: AlarmIndex, *, clock: Clock, rng: Rng, fire: FireFn,
                 abandon: AbandonFn, concurrency: int, metrics: Any) -> None:
        self.index = index
        self._clock = clock
        self._rng = rng
        self._fire_fn = fire
        self._abandon_fn = abandon
        self.concurrency = concurrency
        self._metrics = metrics
        self._log = structlog.get_logger("mailbox_actors.alarms")
        self._entries: dict[Key, _Entry] = {}
        self._heap: list[tuple[int, int, Key]] = []
        self._seq = itertools.count()
        self._indexed: dict[Key, int] = {}  # what the index file durably holds
        self._lazy: dict[Key, int | None] = {}  # later-or-deleted changes not yet written
        self._running: set[Key] = set()
        self._queue: deque[Key] = deque()
        self._workers = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._wake = anyio.Event()
        self._last_flush = 0
        self._index_failing = False  # the last flush could not write (a full disk)
        self.fired = 0
        self.retried = 0
        self.abandoned = 0
        self.lateness_ms: list[int] | None = None  # the benchmark collects here when set

    # ---- state -----------------------------------------------------------------------------

    def load(self, alarms: dict[Key, int]) -> None:
        """Start-up: every alarm the index (or a scan) knows, overdue ones included (AL-4)."""
        for key, at in alarms.items():
            self._entries[key] = _Entry(at)
            self._indexed[key] = at
            self._push(at, key)

    def sink(self, key: Key) -> _Sink:
        return _Sink(self, key)

    @property
    def pending_count(self) -> int:
        return len(self._entries)

    def pending(self, key: Key) -> int | None:
        e = self._entries.get(key)
        return None if e is None else e.at

    def retry_count(self, key: Key) -> int:
        e = self._entries.get(key)
        return 0 if e is None else e.retry

    def _push(self, at: int, key: Key) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), key))
        if len(self._heap) > 2 * len(self._entries) + 1024:
            # Moves leave stale entries behind; rebuild before they outnumber the live ones.
            self._heap = [(e.at, next(self._seq), k) for k, e in self._entries.items()]
            heapq.heapify(self._heap)

    def _before_commit(self, key: Key, at: int) -> None:
        indexed = self._indexed.get(key)
        if indexed is None or at < indexed:
            self._lazy.pop(key, None)
            try:
                self.index.put(key, at)
            except (sqlite3.Error, OSError) as exc:
                # The index must hear of an earlier alarm before the actor commits it: without
                # room to write it, the actor's transaction fails too, retryably (OPS-3).
                raise StorageWriteFailed(f"alarm index: {type(exc).__name__}") from exc
            self._indexed[key] = at

    def _committed(self, key: Key, at: int | None) -> None:
        if at is None:
            self._entries.pop(key, None)
            if key in self._indexed:
                self._lazy[key] = None
            return
        e = self._entries.get(key)
        if e is None:
            self._entries[key] = _Entry(at)
        else:
            e.at, e.retry = at, 0
        self._push(at, key)
        if self._indexed.get(key) != at:
            self._lazy[key] = at
        if self._heap[0][2] == key:
            self._wake.set()

    def flush_index(self) -> None:
        """Write the lazy (later-or-deleted) changes to the index in one transaction."""
        if not self._lazy:
            return
        changes, self._lazy = self._lazy, {}
        try:
            self.index.apply(changes)
        except (sqlite3.Error, OSError) as exc:
            # OPS-3 (a full disk): the index may only be early, and these changes move entries
            # later or delete them, so leaving them out is safe; they are tried again at the next
            # flush, under any change made since.
            if not self._index_failing:  # once per outage, not once per try
                self._log.warning("alarm_index_write_failed", changes=len(changes),
                                  error=type(exc).__name__, retry_every_ms=_INDEX_RETRY_MS)
            self._index_failing = True
            self._lazy = changes | self._lazy
            self._last_flush = self._clock.now_ms() + _INDEX_RETRY_MS - _LAZY_FLUSH_MS
            return
        if self._index_failing:
            self._index_failing = False
            self._log.info("alarm_index_write_recovered", changes=len(changes))
        for key, at in changes.items():
            if at is None:
                self._indexed.pop(key, None)
            else:
                self._indexed[key] = at

    # ---- firing ----------------------------------------------------------------------------

    def next_due_ms(self) -> int | None:
        heap = self._heap
        while heap:
            at, _, key = heap[0]
            e = self._entries.get(key)
            if e is None or e.at != at or key in self._running:
                heapq.heappop(heap)
                continue
            return at
        return None

    def _pop_due(self, now: int) -> list[Key]:
        out: list[Key] = []
        seen: set[Key] = set()
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, key = heapq.heappop(heap)
            e = self._entries.get(key)
            if e is None or e.at != at or key in self._running or key in seen:
                continue
            seen.add(key)
            out.append(key)
        return out

    async def run_due(self, now_ms: int) -> None:
        """Fire everything due at ``now_ms`` and wait for it (FakeClock drives this)."""
        for _ in range(_MAX_ROUNDS):
            keys = self._pop_due(self._clock.now_ms())
            if not keys:
                break
            async with anyio.create_task_group() as tg:
                self._dispatch(keys, tg)
        self.flush_index()

    def _dispatch(self, keys: list[Key], tg: anyio.abc.TaskGroup) -> None:
        self._queue.extend(keys)
        self._running.update(keys)
        while self._workers < self.concurrency and self._workers < len(self._queue):
            self._workers += 1
            self._idle = anyio.Event() if self._idle.is_set() else self._idle
            tg.start_soon(self._worker)

    async def _worker(self) -> None:
        try:
            while self._queue:
                await self._fire(self._queue.popleft())
                # Handlers that never suspend would otherwise hold the loop for the whole queue,
                # starving requests, other workers and shutdown.
                await anyio.lowlevel.checkpoint()
        finally:
            self._workers -= 1
            if not self._workers:
                self._idle.set()

    async def fire_now(self, key: Key) -> bool:
        """Run the key's alarm handler now, whatever its time (for tests); False if none ran."""
        if key in self._running:
            return False
        self._running.add(key)
        if key not in self._entries:
            self._entries[key] = _Entry(self._clock.now_ms())
        before = self.fired + self.retried + self.abandoned
        await self._fire(key, force=True)
        return self.fired + self.retried + self.abandoned > before

    async def _fire(self, key: Key, force: bool = False) -> None:
        e = self._entries.get(key)
        if e is None:
            self._running.discard(key)
            return
        retry, due = e.retry, e.at
        started = self._clock.now_ms()
        try:
            outcome, stored = await self._fire_fn(key, retry, force)
        except Exception as exc:  # the host reports failures as outcomes; this is a bug guard
            self._log.error("alarm_fire_crashed", namespace=key[0], object_id=key[1],
                            error=type(exc).__name__)
            outcome, stored = "failed", None
        finally:
            self._running.discard(key)
            # The loop skipped this key while it ran (and may have dropped its heap entry): an
            # alarm re-armed for now by the handler, or by a request meanwhile, must not wait
            # for the loop's next timeout.
            self._wake.set()
        e = self._entries.get(key)
        if outcome == "done":
            self.fired += 1
            self._metrics.inc("alarms_fired_total", (("namespace", key[0]),))
            if self.lateness_ms is not None:
                self.lateness_ms.append(started - due)
            if e is not None:
                e.retry = 0
                self._push(e.at, key)
        elif outcome == "failed":
            self._retry(key, e, retry, stored)
        elif outcome == "unavailable":
            # The actor's file cannot be opened now (no descriptors left, a newer schema): not
            # the handler failing, and the alarm is still stored. Try again, as long as it takes.
            at = self._clock.now_ms() + _UNAVAILABLE_RETRY_MS
            self._log.warning("alarm_actor_unavailable", namespace=key[0], object_id=key[1],
                              retry_in_ms=_UNAVAILABLE_RETRY_MS)
            if e is None:
                e = self._entries[key] = _Entry(at)
            e.at = at
            self._push(at, key)
        elif outcome == "unknown":
            # This node does not serve the namespace (started without it): the index keeps the
            # alarm for a node that does.
            self._entries.pop(key, None)
        elif outcome in ("later", "busy") and stored is not None:
            if e is None:
                e = self._entries[key] = _Entry(stored)
            e.at = stored
            self._push(stored, key)
        else:  # gone: nothing stored any more
            self._entries.pop(key, None)
            if key in self._indexed:
                self._lazy[key] = None

    def _retry(self, key: Key, e: _Entry | None, retry: int, stored: int | None) -> None:
        nxt = retry + 1
        delay = alarm_retry_delay_ms(nxt, self._rng.random())
        if delay is None:
            self.abandoned += 1
            self._log.error("alarm_abandoned", namespace=key[0], object_id=key[1],
                            retries=ALARM_MAX_RETRIES)
            self._metrics.inc("alarms_abandoned_total", (("namespace", key[0]),))
            self._entries.pop(key, None)
            try:
                now_stored = self._abandon_fn(key, stored)
            except Exception as exc:
                # The alarm is still stored in the actor's file: keep it in the index, so the
                # next start schedules it again.
                self._log.error("alarm_abandon_failed", namespace=key[0], object_id=key[1],
                                error=type(exc).__name__)
                return
            if now_stored is None:
                if key in self._indexed:
                    self._lazy[key] = None
            else:  # set meanwhile, or re-armed for purposes still pending: it stands
                self._committed(key, now_stored)
            return
        self.retried += 1
        self._metrics.inc("alarm_retries_total", (("namespace", key[0]),))
        at = self._clock.now_ms() + delay
        if e is None:
            e = self._entries[key] = _Entry(at)
        e.at, e.retry = at, nxt
        self._push(at, key)

    # ---- the real-time loop ----------------------------------------------------------------

    async def run(self) -> None:
        """Fire alarms as they come due, forever (cancel the surrounding scope to stop)."""
        async with anyio.create_task_group() as tg:
            while True:
                now = self._clock.now_ms()
                keys = self._pop_due(now)
                if keys:
                    self._dispatch(keys, tg)
                if self._lazy and now - self._last_flush >= _LAZY_FLUSH_MS:
                    self._last_flush = now
                    self.flush_index()
                nd = self.next_due_ms()
                wait_ms = _LAZY_FLUSH_MS if nd is None else min(_LAZY_FLUSH_MS, nd - now)
                if wait_ms <= 0:
                    await anyio.lowlevel.checkpoint()
                    continue
                with anyio.move_on_after(wait_ms / 1000):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = anyio.Event()

    async def wait_idle(self) -> None:
        await self._idle.wait()
