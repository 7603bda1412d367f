"""An actor file's write-ahead log is checkpointed by the checkpoint thread, not inside the commits
of the connection that writes it (``checkpoints``, ADR 0001's session 20 section): the log stays
bounded, the thread's connection is counted in ``wal_index``, and a SIGKILL while the thread
checkpoints loses no committed transaction. Real SQLite files, a real second process."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mailbox_actors.platform.storage import checkpoints, wal_index
from mailbox_actors.platform.storage.connection import RUNTIME_TOKEN
from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.opening import open_storage
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.platform.storage.sql import SqlStorage

_ROW = 3000  # bytes a row: one frame of its own (an overflow page) and its leaf's


def _storage(path: Path) -> SqlStorage:
    storage = open_storage(path, create=True, durability=Durability.NORMAL, limits=Limits(),
                           now_ms=lambda: 0)
    assert storage is not None
    storage.exec("CREATE TABLE t (n INTEGER PRIMARY KEY, b BLOB NOT NULL)")
    return storage


def _commit_rows(storage: SqlStorage, first: int, count: int) -> None:
    for n in range(first, first + count):
        storage.transaction_sync(lambda tx, n=n: tx.exec(
            "INSERT INTO t (n, b) VALUES (?, randomblob(?))", n, _ROW))


def _autocheckpoint(storage: SqlStorage) -> int:
    """The connection's ``wal_autocheckpoint``: where SQLite checkpoints inside its commits."""
    return int(storage._sys(f"PRAGMA wal_autocheckpoint /*{RUNTIME_TOKEN}*/").fetchone()[0])


def _log_frames(path: Path) -> int:
    """The frames in the file's log now (a PASSIVE checkpoint's report, from another
    connection)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        conn.close()


def test_a_busy_connection_leaves_its_log_to_the_checkpoint_thread(tmp_path: Path) -> None:
    """RT-2: a connection that commits often hands its log to the checkpoint thread past
    THREAD_FRAMES (SQLite's own checkpoint inside its commits moved to LOOP_FRAMES), and after
    the thread's checkpoint its next commit starts the log again from its beginning."""
    path = tmp_path / "actor.sqlite"
    storage = _storage(path)
    try:
        made = checkpoints.checkpoints_made()
        _commit_rows(storage, 0, checkpoints.LOOK_EVERY)
        assert _autocheckpoint(storage) == checkpoints.LOOP_FRAMES
        # Past THREAD_FRAMES, far below LOOP_FRAMES: only the thread checkpoints. The writes stop
        # once the file is handed over, so that the thread's checkpoint leaves nothing behind.
        handed, n = checkpoints.files_handed(), 100
        while checkpoints.files_handed() == handed and n < checkpoints.LOOP_FRAMES:
            _commit_rows(storage, n, checkpoints.LOOK_EVERY)
            n += checkpoints.LOOK_EVERY
        assert checkpoints.files_handed() > handed
        assert checkpoints.wait_for_checkpoints(10.0)
        assert checkpoints.checkpoints_made() > made
        _commit_rows(storage, 10_000, 1)
        assert _log_frames(path) <= 4  # started again: one transaction's frames
    finally:
        RuntimeStorage(storage).close()


def test_a_connection_that_commits_little_keeps_sqlites_own_checkpoint(tmp_path: Path) -> None:
    """RT-2: fewer than LOOK_EVERY commits (an alarm's activation) cost no look at the log and
    leave SQLite's own checkpoint as it is."""
    path = tmp_path / "actor.sqlite"
    storage = _storage(path)
    try:
        _commit_rows(storage, 0, checkpoints.LOOK_EVERY - 2)  # the CREATE TABLE was one
        assert _autocheckpoint(storage) == 1000
    finally:
        RuntimeStorage(storage).close()


def test_the_checkpoint_threads_connection_is_counted(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """RT-2, ADR 0012: the thread's connection is counted in ``wal_index`` while it is open, so
    no close of this process empties the file's index under it, and given back after."""
    path = tmp_path / "actor.sqlite"
    storage = _storage(path)
    name = wal_index.key(path)
    seen: list[tuple[str, int]] = []

    def opening(counted: str) -> bool:
        first = wal_index.opening(counted)
        seen.append(("opening", wal_index._open_here.get(counted, 0)))
        return first

    def closed(counted: str) -> bool:
        seen.append(("closed", wal_index._open_here.get(counted, 0)))
        return wal_index.closed(counted)

    monkeypatch.setattr(checkpoints, "opening", opening)
    monkeypatch.setattr("mailbox_actors.platform.storage.handle.closed", closed)
    try:
        _commit_rows(storage, 0, checkpoints.THREAD_FRAMES // 2 + 50)
        assert checkpoints.wait_for_checkpoints(10.0)
    finally:
        RuntimeStorage(storage).close()
    assert ("opening", 2) in seen  # the storage's connection and the thread's
    assert seen.count(("closed", 2)) == seen.count(("opening", 2))  # given back while open
    assert name not in wal_index._open_here


_CHILD = textwrap.dedent("""
    import sys
    from mailbox_actors.platform.storage import checkpoints
    from mailbox_actors.platform.storage.limits import Durability, Limits
    from mailbox_actors.platform.storage.opening import open_storage

    storage = open_storage(sys.argv[1], create=True, durability=Durability.NORMAL,
                           limits=Limits(), now_ms=lambda: 0)
    storage.exec("CREATE TABLE t (n INTEGER PRIMARY KEY, b BLOB NOT NULL)")
    n = 0
    while True:
        storage.transaction_sync(lambda tx: tx.exec(
            "INSERT INTO t (n, b) VALUES (?, randomblob(3000))", n))
        print(n, checkpoints.checkpoints_made(), flush=True)  # committed: acknowledged
        n += 1
""")


def test_a_sigkill_while_the_thread_checkpoints_loses_no_commit(tmp_path: Path) -> None:
    """RT-2, REL-1: a process killed with SIGKILL while its checkpoint thread works on a log its
    commits keep growing leaves a sound file holding every transaction it reported committed."""
    path = tmp_path / "actor.sqlite"
    acknowledged: list[int] = []
    made = 0
    with subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE,
                          text=True) as child:
        assert child.stdout is not None
        try:
            deadline = time.monotonic() + 60
            for line in child.stdout:
                n, made = map(int, line.split())
                acknowledged.append(n)
                if made >= 3 or time.monotonic() > deadline:
                    break
            os.kill(child.pid, signal.SIGKILL)
            rest = child.stdout.read()  # what it printed before the kill: committed too
            acknowledged += [int(line.split()[0]) for line in rest.splitlines() if line]
        finally:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    assert made >= 3  # the thread was at work
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {n for (n,) in conn.execute("SELECT n FROM t")}
    finally:
        conn.close()
    assert set(acknowledged) <= stored


def test_a_refused_truncate_after_a_freeing_transaction_is_the_threads_to_make(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RPC-4, IN-6: when a freeing transaction's own TRUNCATE checkpoint is refused, busy (a
    reader's snapshot here; the checkpoint thread at the file does the same), the checkpoint
    thread empties the log once nothing is in the way: no copy of what it removed stays."""
    path = tmp_path / "actor.sqlite"
    storage = _storage(path)
    gate = threading.Event()
    checkpoint = checkpoints._THREAD._checkpoint

    def held(name: str, truncate: bool) -> None:  # the thread starts once the reader is gone
        gate.wait(10)
        checkpoint(name, truncate)

    monkeypatch.setattr(checkpoints._THREAD, "_checkpoint", held)
    try:
        _commit_rows(storage, 0, 10)
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            assert reader.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 10  # a snapshot
            storage.transaction_freeing(lambda tx: tx.exec("DELETE FROM t WHERE n < 5"))
            assert os.path.getsize(f"{path}-wal") > 0  # refused: the snapshot needs the frames
            reader.execute("COMMIT")
        finally:
            reader.close()
        gate.set()
        assert checkpoints.wait_for_checkpoints(10.0)
        assert os.path.getsize(f"{path}-wal") == 0
    finally:
        gate.set()
        RuntimeStorage(storage).close()
