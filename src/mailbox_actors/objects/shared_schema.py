"""Schema more than one object uses, written once: the ``rate_windows`` table and its statements,
and the object-level ``meta`` write (maintenance's ``size_bytes``, AL-6).

The window arithmetic is ``core.rate_windows``'; this module only holds SQL.
"""

from __future__ import annotations

__all__ = ["META_PUT", "RATE_WINDOWS_SCHEMA", "RATE_WINDOW_BUCKETS", "RATE_WINDOW_BUCKETS_BOTH",
           "RATE_WINDOW_BUMP", "RATE_WINDOW_PRUNE"]

# Statements an object adds to its migrations to count rolling windows (OBJ-2, and the Carrier's).
RATE_WINDOWS_SCHEMA = (
    "CREATE TABLE rate_windows (scope TEXT NOT NULL, start_ms INTEGER NOT NULL, "
    "count INTEGER NOT NULL, PRIMARY KEY (scope, start_ms)) WITHOUT ROWID",
)
# (scope, oldest counted start) -> the buckets inside the window
RATE_WINDOW_BUCKETS = "SELECT start_ms, count FROM rate_windows WHERE scope = ? AND start_ms > ?"
# (scope a, oldest of a, scope b, oldest of b) -> RATE_WINDOW_BUCKETS of two windows in one
# statement (two range reads of the primary key): rows of (0 for a | 1 for b, start_ms, count)
RATE_WINDOW_BUCKETS_BOTH = (
    "SELECT 0, start_ms, count FROM rate_windows WHERE scope = ? AND start_ms > ? UNION ALL "
    "SELECT 1, start_ms, count FROM rate_windows WHERE scope = ? AND start_ms > ?")
# (scope, bucket start, count) -> add count to that bucket
RATE_WINDOW_BUMP = ("INSERT INTO rate_windows (scope, start_ms, count) VALUES (?, ?, ?) "
                    "ON CONFLICT (scope, start_ms) DO UPDATE SET count = count + excluded.count")
# (cutoff) -> drop buckets past retention (core.rate_windows.RETENTION_MS)
RATE_WINDOW_PRUNE = "DELETE FROM rate_windows WHERE start_ms < ?"
# (key, value) -> an object's own entry in the meta table (the runtime's keys are written by the
# runtime alone)
META_PUT = "INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)"
