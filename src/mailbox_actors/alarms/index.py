"""The node's index of alarm wake-ups (AL-4), one SQLite file beside the actors.

The actor's own file is the truth. The index only has to be early, never late: an alarm moved
earlier reaches the index before the actor's transaction commits; an alarm moved later or deleted
reaches it afterwards, lazily. A wrong entry can only cause a spurious wake, which the host ignores.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from mailbox_actors.platform.sqlite_files import private_file

__all__ = ["AlarmIndex", "Checkpoints"]

Key = tuple[str, str]
_LOG_BOUND = 4_000  # pages of log (16 MiB) past which the index's own commit checkpoints
_LOG_KEEP = 4 << 20  # bytes of log kept when it starts again


class Checkpoints(Protocol):
    """Who copies the index's log into its file, when not its own commits
    (``node.alarm_index.IndexCheckpoints``: a thread of its own)."""

    def written(self, rows: int) -> None:
        """The index's connection committed ``rows`` rows."""

    def close(self) -> None:
        """The index closes: no more checkpoints."""


class AlarmIndex:
    """``alarms(namespace, object_id, at_ms)``, written synchronously and committed at once."""

    def __init__(self, path: Path, *, durability_full: bool = False,
                 checkpoints: Checkpoints | None = None) -> None:
        """``checkpoints``: the log is copied into the file by them (told of every commit), not
        by a commit of this connection, which would hold the event loop while it copies (up to
        SQLite's 1,000 pages and a sync: 9-44 ms during a burst's lazy writes), except as a
        bound on the log's size (``_LOG_BOUND``)."""
        self.path = path
        self._checkpoints = checkpoints
        private_file(path)  # 0600 like every file of the data directory (OPS-5)
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = " + ("FULL" if durability_full else "NORMAL"))
        if checkpoints is not None:
            # A bound only: while the loop writes on, the thread's passive checkpoints never find
            # the log's end (each races the next piece), so SQLite never starts the log again
            # and it would grow with the burst (417 MB for 100,000 alarms, review of 29886cd).
            # Past _LOG_BOUND pages a commit here copies what the thread has not (little) and
            # the next write starts the log again, cut back to _LOG_KEEP bytes.
            self._conn.execute(f"PRAGMA wal_autocheckpoint = {_LOG_BOUND}")
        self._conn.execute(f"PRAGMA journal_size_limit = {_LOG_KEEP}")
        self._conn.execute("CREATE TABLE IF NOT EXISTS alarms (namespace TEXT NOT NULL, "
                           "object_id TEXT NOT NULL, at_ms INTEGER NOT NULL, "
                           "PRIMARY KEY (namespace, object_id)) WITHOUT ROWID")

    def quick_check(self) -> str | None:
        """None if SQLite's quick check finds the file sound, else what it found."""
        rows = self._conn.execute("PRAGMA quick_check").fetchall()
        return None if rows == [("ok",)] else str(rows[0][0])[:200]

    def load(self) -> dict[Key, int]:
        return _rows(self._conn)

    @staticmethod
    def read(path: Path) -> dict[Key, int]:
        """Every row, read on a connection of its own (a worker thread's, while the node's
        connection writes: WAL readers see the last commit)."""
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        try:
            return _rows(conn)
        finally:
            conn.close()

    def put(self, key: Key, at_ms: int) -> None:
        """Durable before it returns (an autocommit statement)."""
        self._conn.execute("INSERT OR REPLACE INTO alarms (namespace, object_id, at_ms) "
                           "VALUES (?, ?, ?)", (key[0], key[1], at_ms))
        if self._checkpoints is not None:
            self._checkpoints.written(1)

    def apply(self, changes: Mapping[Key, int | None]) -> None:
        """Apply many lazy changes in one transaction (None deletes)."""
        if not changes:
            return
        c = self._conn
        # Two executemany (one statement each, stepped in C) where a Python loop ran one execute
        # per change: the batch is an alarm's worth of work at every fired alarm.
        deleted = [key for key, at in changes.items() if at is None]
        put = [(ns, oid, at) for (ns, oid), at in changes.items() if at is not None]
        c.execute("BEGIN")
        try:
            if deleted:
                c.executemany("DELETE FROM alarms WHERE namespace = ? AND object_id = ?", deleted)
            if put:
                c.executemany("INSERT OR REPLACE INTO alarms (namespace, object_id, at_ms) "
                              "VALUES (?, ?, ?)", put)
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:  # a failed COMMIT (disk full) may leave it open
                c.execute("ROLLBACK")
            raise
        if self._checkpoints is not None:
            self._checkpoints.written(len(changes))

    def checkpoint(self) -> None:
        """What is committed is in the file itself, synced (a log synced only at checkpoints,
        ``synchronous=NORMAL``, could lose its last commits to a power cut); the log emptied, as
        a fresh index's is."""
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM alarms").fetchone()[0])

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.close()
        self._conn.close()


def _rows(conn: sqlite3.Connection) -> dict[Key, int]:
    return {(ns, oid): at for ns, oid, at in
            conn.execute("SELECT namespace, object_id, at_ms FROM alarms")}
