"""Reading an actor's file without activating it (CA-10): no migrations, no alarm, no writes.

The connection refuses every write (``query_only``) and never creates the file, so an operator's
scan can look at an actor's storage while the actor lives or sleeps, and leave no trace.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mailbox_actors.platform.storage.errors import StorageCorrupt
from mailbox_actors.platform.storage.handle import keep_wal_on_close
from mailbox_actors.platform.storage.opening import StorageUnavailable
from mailbox_actors.platform.storage.wal_index import closed, key, opening

__all__ = ["read_only", "table_exists"]


@contextmanager
def read_only(path: Path) -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to ``path``, or None when there is no such file."""
    counted = key(path)
    opening(counted)  # counted before it exists: ``wal_index`` never empties an index under it
    try:
        conn = sqlite3.connect(path.absolute().as_uri() + "?mode=rw", uri=True,
                               isolation_level=None)
    except sqlite3.OperationalError as e:
        closed(counted)
        if not path.exists():
            yield None
            return
        raise StorageUnavailable(type(e).__name__) from e
    try:
        # Closing the last connection to a file checkpoints its log into it and deletes the log
        # (SQLite's default): a sleeping actor's file would change under its reader.
        keep_wal_on_close(conn, path)
        conn.execute("PRAGMA query_only = ON")
        yield conn
    except sqlite3.OperationalError as e:
        raise StorageUnavailable(type(e).__name__) from e
    except sqlite3.DatabaseError as e:
        raise StorageCorrupt(type(e).__name__) from e
    finally:
        conn.close()
        # The last connection here: the index this read rebuilt is emptied before it is
        # written back (``wal_index``), unless another process's connection has it mapped.
        closed(counted)


def table_exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (name,)).fetchone() is not None
