"""Operator inspection of a Carrier user's deliveries (CA-10, CA-15, PO-7): a read-only, paged scan
of the Emails and the Post jobs in one actor's file together. Every actor that keeps Carrier's
tables (IdentityMailbox, Notifier, a user's own actor built on the library) or Post's is read the
same way, whatever its namespace.

It reads the actor's file directly: it opens no owner, runs no migration, creates no table and
arms no alarm, so it works on a sleeping actor and changes nothing. Pages hold at most 64 records
(32 by default), Emails (``kind`` ``email``, by email id) and Post jobs (``kind`` ``post``, by the
producer's key, without any internal prefix) merged in one key order, continued with
``after = next_cursor`` until that is null; these are ordered scans, not snapshots across
concurrent writes, and a page may be short and still continue. A call reads at most ``limit``
rows (32 by default), and never more than 64 in all (the seed's bound): Post's rows, each Email's
row and its Messages' rows (which its counts are made from), each counted as it is stepped; an
Email is shown whole or left for the next page, and a page's first record is always read whole
(at most 50 recipients: one always fits in 64). A record carries state, attempts, retry time
and provider evidence or dead-letter reason, never addresses, events, bodies or headers. An id
with no file, or a file without the delivery tables, is ``uninitialized``. The caller must already
have admitted an operator (the node's operator token).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mailbox_actors.platform.storage.readonly import read_only, table_exists
from mailbox_actors.post.inspection import POST_SCAN, has_post_tables, record_of_row
from mailbox_actors.wire.carrier import (
    DeliveryRecord,
    InspectionAvailable,
    InspectionPage,
    InspectionUninitialized,
    ProviderRejection,
)
from mailbox_actors.wire.errors import InvalidRequest
from mailbox_actors.wire.post import PostInspectionRecord

__all__ = ["DEFAULT_PAGE", "MAX_CURSOR", "MAX_PAGE", "MAX_ROWS", "inspect_deliveries"]

DEFAULT_PAGE = 32
MAX_PAGE = 64
MAX_ROWS = 64  # rows one call reads, in all (the seed: "each call scans at most 64 rows")
MAX_CURSOR = 200  # the longest key: an email id is shorter, a Post key at most 200 characters
_EMAIL_COLUMNS = ("e.email_id, e.status, e.attempts, e.next_attempt_at_ms, e.provider_message_id, "
                  "e.rejection_code, e.rejection_class, e.resolution, e.created_at_ms, "
                  "e.updated_at_ms")
# The Messages in (email id, position) order after a cursor, one row per step (the primary key's
# order on the current layout, ``email_messages_email``'s on the earlier one: no sort); an Email
# is found by the seq its first Message names (current layout) or by its id (earlier layout).
_MESSAGES = ("SELECT email_id, status, email_seq FROM email_messages WHERE email_id > ? "
             "ORDER BY email_id, position")
_MESSAGES_EARLIER = ("SELECT email_id, status, 0 FROM email_messages WHERE email_id > ? "
                     "ORDER BY email_id, position")
_EMAIL_BY_SEQ = f"SELECT {_EMAIL_COLUMNS} FROM emails e WHERE e.seq = ?"
_EMAIL_BY_ID = f"SELECT {_EMAIL_COLUMNS} FROM emails e WHERE e.email_id = ?"

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
            return InspectionUninitialized()  # no file: nothing was ever created here
        has_emails, has_post = table_exists(conn, "emails"), has_post_tables(conn)
        if not (has_emails or has_post):
            return InspectionUninitialized()
        return _page(conn, after or "", limit, has_emails, has_post)


_Row = tuple[Any, ...]  # a row as sqlite3 gives it


class _Budget:
    """The rows one call may still read; each step of a scan that yields a row spends one. A
    page reads at most ``limit`` rows, except that its first record is read whole however many
    it takes (an Email with 50 recipients: 52 with its row and the next Email's first), and never
    more than ``MAX_ROWS`` in all."""

    def __init__(self, soft: int, page: list[Record]) -> None:
        self.used = 0
        self.soft = soft
        self.page = page

    def step(self, rows: Iterator[_Row]) -> _Row | None:
        """The scan's next row, or None at its end; raises ``_Spent`` when none may be read."""
        if self.used >= MAX_ROWS or (self.used >= self.soft and self.page):
            raise _Spent()
        row = next(rows, None)
        if row is not None:
            self.used += 1
        return row


class _Spent(Exception):
    pass


def _page(conn: sqlite3.Connection, after: str, limit: int, has_emails: bool,
          has_post: bool) -> InspectionPage:
    page: list[Record] = []
    budget = _Budget(limit, page)
    earlier = has_emails and not table_exists(conn, "email_message_ids")
    messages = iter(conn.execute(_MESSAGES_EARLIER if earlier else _MESSAGES, (after,))
                    if has_emails else ())
    posts = iter(conn.execute(POST_SCAN, (after,)) if has_post else ())
    done = False  # both scans ended: nothing lies past the page
    message: _Row | None = ("",)  # not read yet
    post: _Row | None = ("",)
    try:
        post = budget.step(posts)
        message = budget.step(messages)
        while len(page) < limit:
            if message is None and post is None:
                done = True
                break
            if message is not None and (post is None or str(message[0]) <= str(post[0])):
                email, message = _email(conn, budget, messages, message, earlier)
                if post is not None and post[0] == email.email_id:
                    # An Email and a Post job with one key: the cursor is that key, so a page
                    # ending between them would skip the second. Both, or (when the page has
                    # room for one only and holds others) neither.
                    if len(page) + 2 > limit and page:
                        break
                    page += [email, record_of_row(post)]
                    post = budget.step(posts)
                    continue
                page.append(email)
            else:
                assert post is not None
                page.append(record_of_row(post))
                post = budget.step(posts)
    except _Spent:
        pass  # the page ends at what was read whole
    # Both scans were seen to end (without reading past the page): nothing is left.
    done = done or (message is None and post is None)
    return InspectionAvailable(records=page,
                               next_cursor=None if done or not page else _key(page[-1]))


def _email(conn: sqlite3.Connection, budget: _Budget, messages: Iterator[_Row],
           first: _Row, earlier: bool
           ) -> tuple[DeliveryRecord, _Row | None]:
    """The Email whose first Message is ``first``, its counts from its Messages (read to the
    next Email's first, which is returned), and its row; ``_Spent`` when it cannot be read whole
    within the budget."""
    email_id, seq = str(first[0]), first[2]
    count, refused = 1, int(first[1] == "refused")
    nxt = budget.step(messages)
    while nxt is not None and nxt[0] == email_id:
        count += 1
        refused += nxt[1] == "refused"
        nxt = budget.step(messages)
    r = budget.step(iter(conn.execute(_EMAIL_BY_ID if earlier else _EMAIL_BY_SEQ,
                                      (email_id if earlier else seq,))))
    assert r is not None, "every Message belongs to an Email"
    return DeliveryRecord(
        email_id=r[0], status=r[1], attempts=r[2], next_attempt_at_ms=r[3],
        provider_message_id=r[4],
        provider_rejection=None if r[5] is None else ProviderRejection(r[5], r[6] or "permanent"),
        messages=count, refused_messages=refused,
        resolved=bool(r[7]) and str(r[7]).startswith("operator:"),
        created_at_ms=r[8], updated_at_ms=r[9]), nxt


def _key(r: Record) -> str:
    return r.email_id if isinstance(r, DeliveryRecord) else r.key
