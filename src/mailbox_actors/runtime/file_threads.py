"""Worker threads for actor files (RT-9, AL-4): an evicted actor's file opened ahead of its alarm
(``opening.connect_ahead``) and a connection made that way closed behind its eviction.

Both are where an alarm on an evicted actor waits for the disk (the log's recovery into a new
``-shm``, the reads; the close's unmapping and, for a log past its bound, the checkpoint), and
SQLite releases the GIL meanwhile, so the event loop goes on with other alarms and requests. The
threads touch no actor state: a connection opened ahead is the loop's once delivered (or closed,
when nobody waits for it any more), and only a connection that no activation holds is closed
behind. Each job costs the loop one queue put, and opens one ``call_soon_threadsafe`` for as many
as finish while the loop has not yet taken the last ones (``_Deliveries``: each call wakes the loop
through its socket, a send that hands the thread's GIL over once more): a fraction of
``anyio.to_thread``'s limiter and cancel scope, which cost the loop about as much as the open saved
it.

Opening ahead is used only while it pays (``ahead_pays``): while opens made on the loop wait for
the disk (``AHEAD_PAYS_WAIT_S``), timed every ``_SAMPLE_EVERY`` opens with the threads drained;
on a quiet disk every open is made on the loop, and one in ``_TIME_EVERY`` timed (a timing is
four system calls, ``busy_s`` twice). A node starts on the loop, its first open timed: a node
restarted into a burst of due alarms found opening ahead on until 256 opens and a drained
sample said otherwise, and on a quiet disk those opens' GIL hand-offs held the loop (session 17:
the first burst window's loop blocked 178 ms against 62-95 ms in the others).

What an open waited is its wall time less the loop thread's time on a CPU and queued for one
(Linux's schedstat, ``busy_s``): on a machine whose CPUs are busy with other processes, the run
queue's wait is not the disk's, and counted as such it turned opening ahead on for 90% of a
burst's opens (session 17).
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.run_queue import RunQueueClock
from mailbox_actors.platform.storage.limits import Limits
from mailbox_actors.platform.storage.opening import OpenedAhead, connect_ahead

__all__ = ["MAX_PENDING_JOBS", "FileThreads"]

# Opening ahead pays when an open on the loop waits (wall time past its CPU time) this long: on a
# quiet disk an open waits about 1 ms and handing it to a thread costs the GIL's hand-offs more
# (always ahead: 25-30% fewer alarms/s with the disk quiet, 1.5-2.5x more with it busy, where the
# -shm's truncate alone waits 2.6 ms on average); 2 ms measured as good as the loop when quiet.
AHEAD_PAYS_WAIT_S = 0.002
# While opening ahead, every this many opens the threads are let drain and one open is made on the
# loop and timed (with no thread holding the GIL meanwhile, its waits are the disk's).
_SAMPLE_EVERY = 256
# While opening on the loop, one open in this many is timed, the first included: a disk that
# starts making opens wait turns opening ahead on within as many opens (a few milliseconds).
_TIME_EVERY = 8

# Jobs queued or running at most when a close is handed over: past it the loop closes the file
# itself, so that the connections waiting for a thread stay few (each holds three descriptors that
# max_active_actors no longer counts).
MAX_PENDING_JOBS = 64

_log = get_logger("mailbox_actors.runtime")


class FileThreads:
    """Up to ``threads`` daemon threads fed by one queue (none: ``enabled`` is False and the
    host opens and closes files on the loop, in the scheduler's order); ``stop`` ends them."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._running: list[threading.Thread] = []
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.stopped = False
        # How long opens on the loop waited lately (a moving average; it starts as if they
        # waited for nothing, so a node opens on the loop until its own opens say otherwise).
        self._wait_s = 0.0
        self._opens = 0
        self._sampling = False  # opens stay on the loop until the threads drained and one is timed
        # Whether the open ``ahead_pays`` just sent to the loop is to be timed (while the threads
        # are ``idle``: ``opened_on_loop``).
        self.timing = True
        self._busy = 0  # jobs queued or running
        self._deliveries: _Deliveries | None = None  # opens handed back to the loop
        # The run-queue wait of the thread that first timed an open (the loop's): made then.
        self._run_queue: RunQueueClock | None = None

    @property
    def enabled(self) -> bool:
        return self._threads > 0 and not self.stopped

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        finally:
            with self._lock:
                self._busy -= 1

    def ahead_pays(self) -> bool:
        """Whether to open the next evicted actor's file ahead (``enabled`` assumed): while opens
        on the loop wait for the disk, but for a sample every ``_SAMPLE_EVERY`` opens."""
        self._opens += 1
        if self._wait_s < AHEAD_PAYS_WAIT_S:
            self.timing = self._opens % _TIME_EVERY == 1
            return False
        self.timing = True
        if self._opens % _SAMPLE_EVERY == 0:
            self._sampling = True
        return not self._sampling

    @property
    def idle(self) -> bool:
        """No job queued or running: an open on the loop now can be timed (``opened_on_loop``)."""
        return self._busy == 0

    def busy_s(self) -> float:
        """Seconds the calling thread (the loop's) has been on a CPU (``time.thread_time``) or
        waiting in the run queue for one (``platform.run_queue``; none where not reported):
        what an open's wall time less this is, the open waited for the disk."""
        run_queue = self._run_queue
        if run_queue is None:
            run_queue = self._run_queue = RunQueueClock()
        return time.thread_time() + run_queue()

    def opened_on_loop(self, wall_s: float, busy_s: float) -> None:
        """An open made on the loop while ``idle`` took ``wall_s``, ``busy_s`` of it on a CPU or
        queued for one (``busy_s``): the rest it waited for the disk."""
        self._wait_s += (max(0.0, wall_s - busy_s) - self._wait_s) / 2
        self._sampling = False

    def _put(self, job: Callable[[], None]) -> None:
        with self._lock:
            self._busy += 1
        if len(self._running) < self._threads:
            thread = threading.Thread(target=_work, args=(self._jobs,), daemon=True,
                                      name="mailbox-actors-files")
            thread.start()
            self._running.append(thread)
        self._jobs.put(functools.partial(self._run, job))

    def open(self, path: Path, durability: str, limits: Limits,
             meta_keys: tuple[str, ...]) -> asyncio.Future[OpenedAhead | None]:
        """``connect_ahead(path, ...)`` in a thread; the connection (or None) comes back on
        this loop. Not after ``stop`` (the caller opens on the loop then)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[OpenedAhead | None] = loop.create_future()
        deliveries = self._deliveries
        if deliveries is None or deliveries.loop is not loop:
            deliveries = self._deliveries = _Deliveries(loop)
        self._put(functools.partial(_open, deliveries, fut, path, durability, limits, meta_keys))
        return fut

    def close_behind(self, close: Callable[[], None]) -> bool:
        """Run ``close`` (an evicted actor's ``close_connection``) in a thread; False when not
        enabled or ``MAX_PENDING_JOBS`` are queued or running already: the caller closes it."""
        if not self.enabled or self._busy >= MAX_PENDING_JOBS:
            return False
        self._put(close)
        return True

    def stop(self) -> None:
        """Every job queued runs, then the threads end; ``join`` waits for them."""
        self.stopped = True
        if self._run_queue is not None:
            self._run_queue.close()
        for _ in self._running:
            self._jobs.put(None)

    def join(self, timeout_s: float) -> None:
        for thread in self._running:
            thread.join(timeout_s)
        self._running = []


def _work(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
    while (job := jobs.get()) is not None:
        try:
            job()
        except Exception as e:  # a close that fails must not end the thread
            _log.error("actor_close_failed", error=type(e).__name__)


# An open made ahead on its way to the loop: its waiter, the connection (None: the loop opens),
# and the file it is for (a connection nobody takes any more is closed with it: ``wal_index``).
_Ready = tuple[asyncio.Future[OpenedAhead | None], OpenedAhead | None, Path]


class _Deliveries:
    """Opens made ahead on their way to the loop: the first that finishes while none is waiting
    schedules the loop's ``_take`` (one ``call_soon_threadsafe``); those that finish before the
    loop ran it go with it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._ready: list[_Ready] = []

    def put(self, fut: asyncio.Future[OpenedAhead | None], opened: OpenedAhead | None,
            path: Path) -> None:
        """From a worker thread: ``opened`` (or None), made for ``path``, for ``fut``'s waiter."""
        with self._lock:
            self._ready.append((fut, opened, path))
            if len(self._ready) > 1:  # the loop's _take is scheduled already
                return
        try:
            self.loop.call_soon_threadsafe(self._take)
        except RuntimeError:  # the loop is closed: nobody will take them
            for _fut, made, made_for in self._taken():
                if made is not None:
                    made.close(made_for)

    def _taken(self) -> list[_Ready]:
        with self._lock:
            ready, self._ready = self._ready, []
        return ready

    def _take(self) -> None:
        for fut, opened, path in self._taken():
            _deliver(fut, opened, path)


def _open(deliveries: _Deliveries, fut: asyncio.Future[OpenedAhead | None],
          path: Path, durability: str, limits: Limits, meta_keys: tuple[str, ...]) -> None:
    opened = None
    try:
        opened = connect_ahead(path, durability, limits, meta_keys)
    finally:  # whatever happened, the alarm waiting for it goes on (None: the loop opens)
        deliveries.put(fut, opened, path)


def _deliver(fut: asyncio.Future[OpenedAhead | None], opened: OpenedAhead | None,
             path: Path) -> None:
    if not fut.cancelled():
        fut.set_result(opened)
    elif opened is not None:
        opened.close(path)  # its file's count given back (``wal_index``)
