"""Post's rows in the operator's delivery inspection (PO-7, CA-10).

``inspection_records(conn, after, limit)`` reads a producer's ``post_jobs`` on a read-only
connection (``platform.storage.readonly.read_only(path)``, as the mailbox's scan opens it): key,
state, attempts, retry time and dead-letter reason, never an address or an event. Delivered rows
keep only their key and state. It creates nothing, opens no owner and arms no alarm; the operator
scan (``objects/delivery_inspection.py``) can page these beside Carrier's records.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from mailbox_actors.wire.post import PostInspectionRecord

__all__ = ["POST_SCAN", "has_post_tables", "inspection_records", "record_of_row"]

# Post's jobs in key order after a cursor, read one row per step (the key's index: no sort), so
# a caller that counts the rows it fetches knows how many the scan read.
POST_SCAN = ("SELECT key, state, attempts, next_attempt_at_ms, reason FROM post_jobs "
             "WHERE key > ? ORDER BY key")


def has_post_tables(conn: sqlite3.Connection) -> bool:
    """Whether this file has Post's jobs table (else the scan answers ``uninitialized``)."""
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                             "AND name = 'post_jobs'").fetchall())


def inspection_records(conn: sqlite3.Connection, after: str | None = None, limit: int = 32
                       ) -> tuple[list[PostInspectionRecord], str | None]:
    """One page of Post records in key order (at most ``limit``, 1..64) and the cursor to go on
    with (None at the end). Keys and cursors are the producer's own keys. A file without Post's
    tables has none."""
    if not 1 <= limit <= 64:
        raise ValueError("limit is 1 to 64")
    if not has_post_tables(conn):
        return [], None
    rows = conn.execute(f"{POST_SCAN} LIMIT ?", (after or "", limit + 1)).fetchall()
    out = [record_of_row(r) for r in rows[:limit]]
    return out, (out[-1].key if len(rows) > limit and out else None)


def record_of_row(row: tuple[Any, ...]) -> PostInspectionRecord:
    """A ``POST_SCAN`` row as the operator sees it: a delivered job keeps only key and state."""
    key, state, attempts, next_at, reason = row
    if state == "delivered":
        return PostInspectionRecord(key=key, state=state)
    return PostInspectionRecord(
        key=key, state=state, attempts=attempts,
        retry_at_ms=next_at if state in ("queued", "failed") else None, reason=reason)
