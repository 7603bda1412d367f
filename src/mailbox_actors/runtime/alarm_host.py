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

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from mailbox_actors.alarms.outcome import AlarmOutcome, AlarmResult
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.storage.opening import OpenedAhead
from mailbox_actors.runtime import alarm_runs
from mailbox_actors.runtime.activation import META_KEYS, Activation, Key
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.file_threads import FileThreads
from mailbox_actors.runtime.outbox import EventSink
from mailbox_actors.runtime.scope import RequestScope
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.runtime.watchdog import LoopWatch
from mailbox_actors.wire.errors import MailboxActorsError

__all__ = ["AlarmHost"]

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

    _files: FileThreads
    _opening: dict[Key, bool]

    def path_for(self, namespace: str, object_id: str) -> Path: ...

    def activate(self, cls: type[Actor[Any]], object_id: str, *, create: bool,
                 ahead: OpenedAhead | None = None,
                 path: Path | None = None) -> Activation | None: ...

    def _release(self, act: Activation) -> None: ...


class AlarmHost:
    """Mixed into ``ActorHost``: ``fire_alarm`` and ``abandon_alarm``."""

    async def fire_alarm(self: _Host, key: Key, retry_count: int,
                         force: bool = False) -> AlarmResult:
        """Run an actor's alarm handler if its stored alarm is due, or at once when ``force``
        (AL-3, AL-4)."""
        cls = self._classes.get(key[0])
        if cls is None:
            return AlarmResult(AlarmOutcome.UNKNOWN, None)
        if self.stopping:
            return AlarmResult(AlarmOutcome.BUSY, None)
        act = self._active.get(key)
        if act is None:  # evicted: open it, ahead in a thread while that pays
            files = self._files
            opened = (await _open_ahead(self, cls, key) if files.enabled and files.ahead_pays()
                      else _open_on_loop(self, cls, key))
            if isinstance(opened, AlarmResult):
                return opened
            act = opened
        now = self.clock.now_ms()
        stored = act.runtime_storage.stored_alarm()
        skip = alarm_runs.not_runnable(act, stored, force, now)
        if skip is not None:
            return skip
        assert stored is not None, "not_runnable let through a wake without an alarm"
        act.alarm_running = True
        act.pending += 1  # an alarm run is never refused by the queue bound
        self._inflight += 1
        try:
            return await alarm_runs.run(act, retry_count, stored,
                                        RequestScope(self.ids.new_id("req"), None),
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


def _open_on_loop(host: _Host, cls: type[Actor[Any]], key: Key) -> Activation | AlarmResult:
    """Activate an evicted actor for its alarm on the loop, or the outcome that ends the wake:
    GONE (no such actor), UNAVAILABLE (its file cannot be opened now)."""
    files = host._files
    # Does the disk make an open on the loop wait? (Timed while the threads are idle.)
    timed = (time.perf_counter(), time.thread_time()) if files.enabled and files.idle else None
    try:
        return _activated(host, cls, key, None, None)
    finally:
        if timed is not None:
            files.opened_on_loop(time.perf_counter() - timed[0], time.thread_time() - timed[1])


async def _open_ahead(host: _Host, cls: type[Actor[Any]], key: Key) -> Activation | AlarmResult:
    """``_open_on_loop`` with the file's connection made ahead in a worker thread; BUSY when
    the node stops meanwhile."""
    path = host.path_for(*key)  # once: activate() is given it
    host._opening[key] = True
    try:
        ahead = await host._files.open(path, host.settings.durability, host.settings.limits,
                                       META_KEYS)
    finally:
        fresh = host._opening.pop(key, False)
    # No await from here to activate(): the connection is the activation's, or closed.
    if ahead is not None and (host.stopping or not fresh):
        # Opened or closed on the loop meanwhile (a request, an eviction, a delete_all): the
        # file under this connection may be one since removed, so it goes unused.
        ahead.conn.close()
        ahead = None
    if host.stopping:
        return AlarmResult(AlarmOutcome.BUSY, None)
    return _activated(host, cls, key, ahead, path)


def _activated(host: _Host, cls: type[Actor[Any]], key: Key, ahead: OpenedAhead | None,
               path: Path | None) -> Activation | AlarmResult:
    try:
        act = host.activate(cls, key[1], create=False, ahead=ahead, path=path)
    except MailboxActorsError:
        return AlarmResult(AlarmOutcome.UNAVAILABLE, None)
    return AlarmResult(AlarmOutcome.GONE, None) if act is None else act
