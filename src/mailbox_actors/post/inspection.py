"""Post's rows in the operator's delivery inspection (PO-7, CA-10).

``inspection_records(sql, after, limit)`` reads an actor file's ``post_jobs`` without creating
tables, opening an owner or arming an alarm: key, state, attempts, retry time and dead-letter
reason, never an address or an event. Delivered rows keep only their key and state. The
operator's scan (``objects/identity_mailbox/inspection.py``) merges these with Carrier's records.
"""

from __future__ import annotations

from typing import Any

from mailbox_actors.wire.post import PostInspectionRecord

__all__ = ["has_post_tables", "inspection_records"]


def has_post_tables(sql: Any) -> bool:
    """Whether this file has Post's jobs table (else the scan answers ``uninitialized``)."""
    return bool(sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                         "AND name = 'post_jobs'").all())


def inspection_records(sql: Any, after: str | None = None, limit: int = 32
                       ) -> tuple[list[PostInspectionRecord], str | None]:
    """One page of Post records in key order (at most ``limit``, 1..64) and the cursor to go on
    with (None at the end). Keys are the producer's own keys."""
    if not 1 <= limit <= 64:
        raise ValueError("limit is 1 to 64")
    if not has_post_tables(sql):
        return [], None
    rows = sql.exec("SELECT key, state, attempts, next_attempt_at_ms, reason FROM post_jobs "
                    "WHERE key > ? ORDER BY key LIMIT ?", after or "", limit).all()
    out = []
    for key, state, attempts, next_at, reason in rows:
        if state == "delivered":
            out.append(PostInspectionRecord(kind="post", key=key, state=state))
        else:
            out.append(PostInspectionRecord(
                kind="post", key=key, state=state, attempts=attempts,
                retry_at_ms=next_at if state in ("queued", "failed") else None,
                reason=reason))
    return out, (rows[-1][0] if len(rows) == limit else None)
