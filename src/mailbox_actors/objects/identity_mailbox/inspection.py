"""Operator inspection of an IdentityMailbox's deliveries (CA-10, PO-7): a read-only, paged scan
of its Emails and its Post jobs together.

It reads the actor's file directly: it opens no owner, runs no migration, creates no table and
arms no alarm, so it works on a sleeping actor and changes nothing. Pages hold at most 64 records
(32 by default), Emails (``kind`` ``email``, by email id) and Post jobs (``kind`` ``post``, by the
producer's key, without any internal prefix) merged in one key order, continued with
``after = next_cursor`` until that is null; these are ordered scans, not snapshots across
concurrent writes. A record carries state, attempts, retry time and provider evidence or
dead-letter reason, never addresses, events, bodies or headers. The caller must already have
admitted an operator (the node's operator token).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mailbox_actors.platform.storage.readonly import read_only, table_exists
from mailbox_actors.post.inspection import has_post_tables, inspection_records
from mailbox_actors.wire.carrier import (
    DeliveryRecord,
    InspectionAvailable,
    InspectionPage,
    InspectionUninitialized,
    ProviderRejection,
)
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.post import PostInspectionRecord

__all__ = ["DEFAULT_PAGE", "MAX_CURSOR", "MAX_PAGE", "inspect_deliveries"]

DEFAULT_PAGE = 32
MAX_PAGE = 64
MAX_CURSOR = 200  # the longest key: an email id is shorter, a Post key at most 200 characters
_SCAN = ("SELECT e.email_id, e.status, e.attempts, e.next_attempt_at_ms, e.provider_message_id, "
         "e.rejection_code, e.rejection_class, e.resolution, e.created_at_ms, e.updated_at_ms, "
         "(SELECT count(*) FROM email_messages m WHERE m.email_id = e.email_id), "
         "(SELECT count(*) FROM email_messages m WHERE m.email_id = e.email_id AND "
         "m.status = 'refused') FROM emails e WHERE e.email_id > ? ORDER BY e.email_id LIMIT ?")
# The same for a file keyed as ``carrier_keys`` describes (no email-id index): the Emails in id
# order are their first Messages in the Messages' key order.
_SCAN_KEYED = _SCAN.replace("FROM emails e WHERE e.email_id > ? ORDER BY e.email_id", (
    "FROM email_messages f JOIN emails e ON e.seq = f.email_seq WHERE f.email_id > ? AND "
    "f.position = 0 ORDER BY f.email_id"))

Record = DeliveryRecord | PostInspectionRecord


def inspect_deliveries(path: Path, after: str | None = None,
                       limit: int = DEFAULT_PAGE) -> InspectionPage:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be 1..{MAX_PAGE}", details={"field": "limit"})
    if after is not None and not (0 < len(after) <= MAX_CURSOR):
        raise InvalidRequest("after must be a cursor from an earlier page",
                             details={"field": "after"})
    with read_only(path) as conn:
        if conn is None:
            raise MailboxActorsError(ErrorCode.IDENTITY_NOT_FOUND,
                                     "no identity_mailbox object has been created here")
        has_emails, has_post = table_exists(conn, "emails"), has_post_tables(conn)
        if not (has_emails or has_post):
            return InspectionUninitialized()
        emails = _emails(conn, after, limit + 1) if has_emails else []
        posts, post_more = inspection_records(conn, after, limit) if has_post else ([], None)
    # Both lists are in key order and each holds this page's candidates (emails one extra, Post
    # a continuation when it has more), so their merge's first ``limit`` is the page.
    merged: list[Record] = sorted([*emails, *posts], key=_order)
    page = merged[:limit]
    if len(merged) > limit and _key(merged[limit]) == _key(page[-1]):
        # An Email and a Post job with the same key share a page: the cursor is that key, and a
        # page ending between them would skip the second. The page ends before both, or, at
        # limit 1, holds both (two records, still within the 64 a page may hold).
        if len(page) > 1:
            page.pop()
        else:
            page.append(merged[limit])
    more = len(merged) > len(page) or post_more is not None
    return InspectionAvailable(records=page,
                               next_cursor=_key(page[-1]) if more and page else None)


def _key(r: Record) -> str:
    return r.email_id if isinstance(r, DeliveryRecord) else r.key


def _order(r: Record) -> tuple[str, int]:
    # Python's str order is code-point order, the same as SQLite's BINARY order over UTF-8.
    return _key(r), 0 if isinstance(r, DeliveryRecord) else 1


def _emails(conn: sqlite3.Connection, after: str | None, n: int) -> list[DeliveryRecord]:
    # A sleeping actor's file may be of an earlier layout: inspection migrates nothing.
    scan = _SCAN_KEYED if table_exists(conn, "email_message_ids") else _SCAN
    rows = conn.execute(scan, (after or "", n)).fetchall()
    return [DeliveryRecord(
        email_id=r[0], status=r[1], attempts=r[2], next_attempt_at_ms=r[3],
        provider_message_id=r[4],
        provider_rejection=None if r[5] is None else ProviderRejection(r[5], r[6] or "permanent"),
        messages=r[10], refused_messages=r[11],
        resolved=bool(r[7]) and str(r[7]).startswith("operator:"),
        created_at_ms=r[8], updated_at_ms=r[9]) for r in rows]
