"""Opening the node's alarm index at start (AL-4, OPS-2): rebuilt from the actor files when it is
missing, incomplete or damaged, while the node already serves.

The index is derived data (every actor's file holds its own alarm), so a damaged index is never a
reason to refuse to start: it is moved aside (kept beside, for inspection) and rebuilt by a scan.
A start never waits for that scan: the node opens a fresh index at once (every alarm set from then
on reaches it as always), serves requests, and merges what the scan of the actor files finds when
it is done (``AlarmBook.merge_scanned``): alarms due meanwhile fire late, never not at all. Until
the merge is durable a marker file beside the index (``alarms.sqlite.incomplete``) says the index
does not hold every alarm yet, so a start after a crash part-way scans again (and keeps what the
incomplete index already holds: only ever early).

``serve`` does not wait for the index's quick check either: it opens the index trusting it, and
checks it after its first answer, on a connection of a worker thread (``check_file``); damage
found then sets the file aside as at a start (``rebuild_damaged``), the book takes the fresh index
with every alarm set meanwhile (``AlarmBook.replace_index``), and the scan finds the rest.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.sqlite_files import damage_of, private_file

__all__ = ["IndexCheckpoints", "OpenedIndex", "check_file", "finish_scan", "incomplete_marker",
           "mark_incomplete", "open_alarm_index", "rebuild_damaged"]

Key = tuple[str, str]

_log = get_logger("mailbox_actors.node")


class OpenedIndex:
    """The open index, and whether it holds every alarm (else: scan). Its rows are read by the
    node (``AlarmIndex.read``), in the background when it serves meanwhile."""

    __slots__ = ("complete", "index")

    def __init__(self, index: AlarmIndex, complete: bool) -> None:
        self.index = index
        self.complete = complete


def incomplete_marker(path: Path) -> Path:
    return path.with_name(path.name + ".incomplete")


def check_file(path: Path) -> str | None:
    """SQLite's quick check of the index at ``path`` on a connection of its own (a worker
    thread's, while the node's connection writes): None if sound, else what it found. Damage
    that stops the check itself raises ``sqlite3.DatabaseError``; a lock or a missing descriptor
    raises ``sqlite3.OperationalError`` (not the file's fault)."""
    conn = sqlite3.connect(path.absolute().as_uri() + "?mode=rw", uri=True, isolation_level=None)
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    finally:
        conn.close()
    return None if rows == [("ok",)] else str(rows[0][0])[:200]


class IndexCheckpoints:
    """The index's log copied into its file on a thread of its own, on its own connection
    (``AlarmIndex(checkpoints=...)``), never by the event loop's commits: a checkpoint copies up
    to SQLite's 1,000 pages and syncs (9-44 ms measured during a burst's lazy writes, every ~1.5
    s), and SQLite releases the GIL while it does, so the loop serves meanwhile.

    After every ``every_rows`` rows committed the thread is woken for one passive checkpoint (it
    waits for nobody: what a reader still needs is copied at the next). It is started at the
    first, so an idle node has no thread and no timer; ``close`` ends it. What is committed is
    durable by the log as before (``synchronous``); a crash before a checkpoint loses nothing."""

    def __init__(self, path: Path, *, every_rows: int = 1_000) -> None:
        self.path = path
        self.every_rows = every_rows
        self.done = 0  # checkpoints made (read by tests)
        self._rows = 0
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._failing = False

    def written(self, rows: int) -> None:
        self._rows += rows
        if self._rows < self.every_rows or self._closing:
            return
        self._rows = 0
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="alarm-index-checkpoints",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        conn = sqlite3.connect(self.path.absolute().as_uri() + "?mode=rw", uri=True,
                               isolation_level=None)
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._closing:
                    return
                self.checkpoint(conn)
        finally:
            conn.close()

    def checkpoint(self, conn: sqlite3.Connection) -> None:
        """One passive checkpoint on ``conn`` (the thread's); a failure (a full disk) is said
        once and tried again at the next wake (the log only grows meanwhile)."""
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as e:
            if not self._failing:
                _log.warning("alarm_index_checkpoint_failed", error=type(e).__name__)
            self._failing = True
            return
        self._failing = False
        self.done += 1


def open_alarm_index(path: Path, *, durability_full: bool, now_ms: Callable[[], int],
                     say: Callable[[str], None],
                     quick_check: Callable[[AlarmIndex], str | None] | None = AlarmIndex.quick_check,
                     ) -> OpenedIndex:
    """The index to serve with at once; ``complete`` False: a scan of the actor files must be
    merged into it (``finish_scan``). ``quick_check`` None: the file is trusted now and checked
    by the caller later (``check_file``, then ``rebuild_damaged`` if it is damaged); only its
    header is checked here."""
    damage = damage_of(path) if path.is_file() else None
    if damage is not None:
        _set_aside(path, damage, now_ms(), say)
    marker = incomplete_marker(path)
    if not path.exists() or marker.exists():  # first start, deleted, set aside, or a scan cut
        return _incomplete(path, marker, durability_full, say)
    try:
        index = AlarmIndex(path, durability_full=durability_full,
                           checkpoints=IndexCheckpoints(path))
        # C only, no rows made: about 18 ms for 100,000 alarms
        problem = None if quick_check is None else quick_check(index)
        if problem is None:
            return OpenedIndex(index, True)
        index.close()
        _set_aside(path, problem, now_ms(), say)
        return _incomplete(path, marker, durability_full, say)
    except sqlite3.DatabaseError as e:  # damage the header check could not see
        if isinstance(e, sqlite3.OperationalError):
            raise  # locked, out of descriptors, a full disk: not the file's fault
        _set_aside(path, type(e).__name__, now_ms(), say)
        return _incomplete(path, marker, durability_full, say)


def rebuild_damaged(path: Path, problem: str, *, durability_full: bool, now_ms: Callable[[], int],
                    say: Callable[[str], None]) -> OpenedIndex:
    """Damage found after the node began serving with the index (``check_file``; the caller
    closed it): the file is set aside and a fresh index opened, incomplete, as at a start."""
    _set_aside(path, problem, now_ms(), say)
    return _incomplete(path, incomplete_marker(path), durability_full, say)


def _incomplete(path: Path, marker: Path, durability_full: bool,
                say: Callable[[str], None]) -> OpenedIndex:
    mark_incomplete(path)  # before the index: an index without its marker is trusted whole
    say("the alarm index is being rebuilt from the actor files; serving meanwhile (alarms due "
        "before it is done fire late)")
    index = AlarmIndex(path, durability_full=durability_full, checkpoints=IndexCheckpoints(path))
    return OpenedIndex(index, False)


def mark_incomplete(path: Path) -> None:
    """The index's rows could not all be read: it must be scanned again, now and at the next
    start (until a scan's merge is durable)."""
    marker = incomplete_marker(path)
    if not marker.exists():
        private_file(marker)
        _sync_dir(marker.parent)


def finish_scan(index: AlarmIndex) -> None:
    """The scan's alarms are merged into ``index`` (committed): make them durable, then drop the
    marker, so the next start trusts the index whole."""
    index.checkpoint()
    incomplete_marker(index.path).unlink(missing_ok=True)
    _sync_dir(index.path.parent)


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _set_aside(path: Path, damage: str, now: int, say: Callable[[str], None]) -> None:
    aside = path.with_name(f"{path.name}.damaged-{now}")
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            part.rename(aside.with_name(aside.name + suffix))
    _log.warning("alarm_index_damaged", damage=damage, moved_to=str(aside),
                 action="rebuilding it from the actor files")
    say(f"the alarm index was damaged ({damage}); moved to {aside}, rebuilding it")
