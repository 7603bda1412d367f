"""The host's side of the scheduler's ``AlarmRunner`` (AL-3, AL-4, RT-9): which actor a wake is
for, opening it if it was evicted, admitting the run; the run itself is ``alarm_runs``'.

An alarm on an evicted actor spends most of its time opening the file: SQLite opens the database
and its log, rebuilds the ``-shm`` index from the log (a truncate and a read of every frame: on a
busy disk, milliseconds of waiting) and reads the schema. That part runs in a worker thread
(``opening.connect_ahead``; SQLite releases the GIL), so the event loop serves other alarms and
requests meanwhile and the waits of several opens overlap; the open is finished on the loop
(``ActorHost.activate``: the runtime's reads, limits, migrations), where everything else about the
actor happens. Nothing is written in the thread, so a crash there loses nothing.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from mailbox_actors.alarms.outcome import AlarmOutcome, AlarmResult
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.storage.limits import Limits
from mailbox_actors.platform.storage.opening import connect_ahead
from mailbox_actors.runtime import alarm_runs
from mailbox_actors.runtime.activation import Activation, Key
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.outbox import EventSink
from mailbox_actors.runtime.scope import RequestScope
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.runtime.watchdog import LoopWatch
from mailbox_actors.wire.errors import MailboxActorsError

__all__ = ["OPEN_AHEAD_THREADS", "AlarmHost", "OpenAhead"]

# Files opened ahead at once: the waits of a busy disk overlap, and the loop's thread keeps one core.
OPEN_AHEAD_THREADS = 4


class OpenAhead:
    """Worker threads that run ``connect_ahead`` and hand each connection to the event loop: a
    queue and one ``call_soon_threadsafe`` per file, a fraction of ``anyio.to_thread``'s cost
    (its limiter and cancel scope cost the loop about as much as the open saved it). A
    connection that arrives for a wait that was cancelled, or after the loop closed, is closed."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._started = 0
        self._jobs: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()

    def open(self, path: Path, durability: str,
             limits: Limits) -> asyncio.Future[sqlite3.Connection | None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[sqlite3.Connection | None] = loop.create_future()
        if self._started < self._threads:
            self._started += 1
            threading.Thread(target=_work, args=(self._jobs,), name="mailbox-actors-open-ahead",
                             daemon=True).start()
        self._jobs.put((loop, fut, path, durability, limits))
        return fut

    def close(self) -> None:
        """The threads end once the files asked for are opened (and closed: nobody waits)."""
        jobs, self._jobs = self._jobs, queue.SimpleQueue()
        for _ in range(self._started):
            jobs.put(None)
        self._started = 0


def _work(jobs: queue.SimpleQueue[tuple[Any, ...] | None]) -> None:
    while (job := jobs.get()) is not None:
        loop, fut, path, durability, limits = job
        conn = connect_ahead(path, durability, limits)
        try:
            loop.call_soon_threadsafe(_deliver, fut, conn)
        except RuntimeError:  # the loop is closed: nobody will take it
            if conn is not None:
                conn.close()


def _deliver(fut: asyncio.Future[sqlite3.Connection | None],
             conn: sqlite3.Connection | None) -> None:
    if not fut.cancelled():
        fut.set_result(conn)
    elif conn is not None:
        conn.close()


class _Host(Protocol):
    """What ``AlarmHost`` uses of the host it is part of."""

    _classes: dict[str, type[Actor[Any]]]
    _inflight: int
    stopping: bool
    settings: RuntimeSettings
    clock: Clock
    ids: Ids
    log: Any
    watch: LoopWatch
    event_sink: EventSink

    @property
    def _active(self) -> Mapping[Key, Activation]: ...

    _open_ahead: OpenAhead

    def path_for(self, namespace: str, object_id: str) -> Path: ...

    def activate(self, cls: type[Actor[Any]], object_id: str, *, create: bool,
                 conn: sqlite3.Connection | None = None) -> Activation | None: ...

    def _release(self, act: Activation) -> None: ...


class AlarmHost:
    """Mixed into ``ActorHost``: ``fire_alarm`` and ``abandon_alarm``; ``stop_alarms`` at stop."""

    _open_ahead: OpenAhead  # each host makes its own (``ActorHost.__init__``)

    def stop_alarms(self) -> None:
        """The threads that open files ahead end (a file being opened is closed again)."""
        self._open_ahead.close()

    async def fire_alarm(self: _Host, key: Key, retry_count: int,
                         force: bool = False) -> AlarmResult:
        """Run an actor's alarm handler if its stored alarm is due, or at once when ``force``
        (AL-3, AL-4)."""
        cls = self._classes.get(key[0])
        if cls is None:
            return AlarmResult(AlarmOutcome.UNKNOWN, None)
        if self.stopping:
            return AlarmResult(AlarmOutcome.BUSY, None)
        conn = None
        if key not in self._active:
            conn = await self._open_ahead.open(self.path_for(*key), self.settings.durability,
                                               self.settings.limits)
            # No await from here to activate(): the connection is the activation's, or closed.
            if self.stopping:
                if conn is not None:
                    conn.close()
                return AlarmResult(AlarmOutcome.BUSY, None)
        try:
            act = self.activate(cls, key[1], create=False, conn=conn)
        except MailboxActorsError:
            return AlarmResult(AlarmOutcome.UNAVAILABLE, None)
        if act is None:
            return AlarmResult(AlarmOutcome.GONE, None)
        skip = alarm_runs.not_runnable(act, force, self.clock.now_ms())
        if skip is not None:
            return skip
        act.alarm_running = True
        act.pending += 1  # an alarm run is never refused by the queue bound
        self._inflight += 1
        try:
            return await alarm_runs.run(act, retry_count, RequestScope(self.ids.new_id("req"), None),
                                        clock=self.clock, event_sink=self.event_sink, log=self.log,
                                        watch=self.watch)
        finally:
            act.alarm_running = False
            self._release(act)

    def abandon_alarm(self: _Host, key: Key, fired_ms: int | None) -> int | None:
        """After the last retry: clear the alarm, or re-arm it for purposes still pending.
        Returns the alarm stored after it."""
        cls = self._classes.get(key[0])
        if cls is None:
            return None
        act = self.activate(cls, key[1], create=False)
        return None if act is None else alarm_runs.abandon(act, fired_ms, self.clock.now_ms())
