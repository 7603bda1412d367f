"""Actor files' write-ahead logs checkpointed by a thread of their own, not inside the event loop's
commits (ADR 0001, session 20).

SQLite checkpoints a log inside the commit that takes it past 1,000 frames (``wal_autocheckpoint``):
the frames copied into the database and two fsyncs, on the thread that committed, here the event
loop, which waits for the disk meanwhile (about a tenth of an SMTP ingest's wall time). Instead a
connection that commits often looks at the frames it wrote every ``LOOK_EVERY`` commits
(``sqlite3_db_status``, about 1 us) and past ``THREAD_FRAMES`` hands its file to the checkpoint
thread: a PASSIVE checkpoint on a connection of its own, which copies what no reader still needs
and never blocks the writer. The log restarts from its beginning at the loop's next write when
that checkpoint left nothing behind; when commits landed in the log during it (a mailbox written
without a pause), SQLite's own checkpoint in the loop's commits, moved to ``LOOP_FRAMES``, copies
the rest and bounds the log, as it did at 1,000 frames before. (Checkpoints repeated in the
thread until one finished cost more fsyncs than they saved under such writes: the events'
queue file waited for the disk twice as long.) Nothing committed depends on a checkpoint (the log
holds it, synced as ``synchronous`` says), and a checkpoint cut short by a crash is SQLite's to
finish at the next open.

The thread's connection is counted in ``wal_index`` like every connection this process makes to an
actor file, so no close empties the file's ``-shm`` under it (a descriptor opened and closed
outside SQLite would drop the process's POSIX locks). It never writes. It holds the file open for
one job: an actor deleted meanwhile (``wipe.remove_files``) is checkpointed into its unlinked
inode, harmlessly, and a new file made at that path meanwhile is counted as one this process has
open already (its index is not emptied at that open's close: the count is by name). A freeing
transaction whose own TRUNCATE checkpoint the thread (or a reader) refused has the thread empty
the log (``truncate_soon``).
A connection whose handle ``handle`` cannot reach keeps SQLite's own checkpoints at 1,000 frames.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import sqlite3
import threading
import time
from pathlib import Path

from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.storage.handle import _handle, _holding_gil, close_connection
from mailbox_actors.platform.storage.wal_index import closed, key, opening

__all__ = ["LOOK_EVERY", "LOOP_FRAMES", "THREAD_FRAMES", "LogWatch", "checkpoints_made",
           "files_handed", "truncate_soon", "wait_for_checkpoints", "watch"]

THREAD_FRAMES = 1000  # SQLite's own default autocheckpoint: the log's size between checkpoints
LOOP_FRAMES = 2 * THREAD_FRAMES  # SQLite's own, inside the loop's commits: the rest, the bound
LOOK_EVERY = 4  # commits between looks at the frames a connection wrote (a power of two)
# A log to empty (``truncate_soon``): tries, and the wait between them, while the loop's
# transaction or a reader's snapshot is in the way (0.1 s in all; past it the next freeing
# transaction's checkpoint takes the frames, as a reader's snapshot made them wait before).
_TRUNCATE_TRIES = 20
_TRUNCATE_WAIT_S = 0.005

_CACHE_WRITE = 9  # SQLITE_DBSTATUS_CACHE_WRITE: pages written, in WAL mode the frames appended
_log = get_logger("mailbox_actors.runtime")


class _Library:
    """``sqlite3_db_status`` and ``sqlite3_wal_autocheckpoint`` called with the GIL held (short
    calls: releasing and retaking it would be a point where another thread takes it)."""

    def __init__(self) -> None:
        held = _holding_gil()
        self.status = ctypes.PYFUNCTYPE(
            ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.c_int)(("sqlite3_db_status", held))
        self.autocheckpoint = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)(
            ("sqlite3_wal_autocheckpoint", held))
        self._current = ctypes.c_int()
        self._high = ctypes.c_int()
        self.current_at = ctypes.addressof(self._current)
        self.high_at = ctypes.addressof(self._high)

    def frames(self, handle: int) -> int:
        """The frames the connection ``handle`` appended to its log since it opened."""
        self.status(handle, _CACHE_WRITE, self.current_at, self.high_at, 0)
        return self._current.value


_lib: _Library | None = None


class LogWatch:
    """One connection's log, looked at from its commits (``committed``)."""

    __slots__ = ("_at", "_handle", "_name")

    def __init__(self, handle: int, name: str) -> None:
        self._handle = handle
        self._name = name
        self._at = 0  # the frames written when the file was last handed over (or checkpointed)

    def committed(self) -> None:
        """After a commit: hand the file to the checkpoint thread when the connection wrote
        ``THREAD_FRAMES`` since it last did (and the thread is not at it already)."""
        assert _lib is not None
        written = _lib.frames(self._handle)
        if written - self._at >= THREAD_FRAMES and _THREAD.hand(self._name):
            self._at = written


def watch(conn: sqlite3.Connection, path: str | Path) -> LogWatch | None:
    """A watch on ``conn``'s log, with SQLite's own checkpoint inside its commits moved to
    ``LOOP_FRAMES`` from now; None (SQLite's own stays) when its handle cannot be reached."""
    global _lib
    handle = _handle(conn, path)
    if not handle:
        return None
    lib = _lib
    if lib is None:
        lib = _lib = _Library()
    if lib.autocheckpoint(handle, LOOP_FRAMES) != 0:
        return None
    return LogWatch(handle, key(path))


class _CheckpointThread:
    """One daemon thread fed file names; a file is queued at most once at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[str] = set()  # handed and not yet checkpointed
        self._truncate: set[str] = set()  # of those, the ones to end with the log emptied
        self._jobs: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition(self._lock)
        self.made = 0  # checkpoints the thread made (tests read it)
        self.handed = 0  # files handed to it (tests read it)
        self._failing = False

    def hand(self, name: str, truncate: bool = False) -> bool:
        """Queue a checkpoint of ``name`` (with ``truncate``, ending in a TRUNCATE one: the log
        emptied); False when one is queued or running already (it truncates too, if asked)."""
        with self._lock:
            if truncate:
                self._truncate.add(name)
            if name in self._pending:
                return False
            self._pending.add(name)
            self.handed += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="mailbox-actors-checkpoints")
                self._thread.start()
        self._jobs.put(name)
        return True

    def _run(self) -> None:
        while (name := self._jobs.get()) is not None:
            try:
                truncate = False
                while True:  # again while a truncate was asked for meanwhile
                    self._checkpoint(name, truncate)
                    with self._lock:
                        truncate = name in self._truncate
                        self._truncate.discard(name)
                    if not truncate:
                        break
            finally:
                with self._lock:
                    self._pending.discard(name)
                    if not self._pending:
                        self._idle.notify_all()

    def _checkpoint(self, name: str, truncate: bool) -> None:
        opening(name)  # counted: no -shm emptied, no header checked under this connection
        try:
            # No busy timeout: a TRUNCATE checkpoint waiting for a reader would hold the log's
            # write lock meanwhile, and the loop's next write would wait for it.
            conn = sqlite3.connect(Path(name).as_uri() + "?mode=rw", uri=True, timeout=0,
                                   isolation_level=None, cached_statements=0)
        except sqlite3.Error:  # the file went (an actor deleted): nothing to checkpoint
            closed(name)
            return
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.made += 1
            for _ in range(_TRUNCATE_TRIES if truncate else 0):
                if not conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                    break  # emptied
                time.sleep(_TRUNCATE_WAIT_S)  # the loop's transaction, or a reader, in the way
            self._failing = False
        except sqlite3.Error as e:  # a full disk: the log waits; SQLite's own bound holds it
            if not self._failing:
                _log.warning("actor_checkpoint_failed", error=type(e).__name__)
            self._failing = True
        finally:
            close_connection(conn, name, keep_wal=True)

    def wait(self, timeout_s: float) -> bool:
        """Until no checkpoint is queued or running (True), or ``timeout_s`` passed."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._pending, timeout_s)

    def stop(self) -> None:
        """At the interpreter's exit: the queued checkpoints made, then the thread ends."""
        thread = self._thread
        if thread is not None:
            self._jobs.put(None)
            thread.join(10.0)

    def forget(self) -> None:
        """In a forked child: no thread runs there, and nothing is queued."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = set()
        self._truncate = set()
        self._jobs = queue.SimpleQueue()
        self._thread = None


_THREAD = _CheckpointThread()
atexit.register(_THREAD.stop)
os.register_at_fork(after_in_child=_THREAD.forget)


def truncate_soon(path: str | Path) -> None:
    """A freeing transaction's own TRUNCATE checkpoint (``Transactions._truncate_wal``) was
    refused, busy: the thread checkpointing the file (or a reader's snapshot) in the way. The
    thread empties the log once it can, so that what the transaction removed leaves no copy in
    it (RPC-4, IN-6)."""
    _THREAD.hand(key(path), truncate=True)


def checkpoints_made() -> int:
    """Checkpoints the thread made in this process (tests)."""
    return _THREAD.made


def files_handed() -> int:
    """Files handed to the thread in this process (tests)."""
    return _THREAD.handed


def wait_for_checkpoints(timeout_s: float = 10.0) -> bool:
    """Until the thread has made every checkpoint handed to it (tests, and a clean stop)."""
    return _THREAD.wait(timeout_s)
