"""Operator inspection of an IdentityMailbox's deliveries (CA-10): a read-only, paged scan.

It reads the actor's file directly: it opens no owner, runs no migration, creates no table and
arms no alarm, so it works on a sleeping actor and changes nothing. Pages hold at most 64 records
(32 by default) in email-id order, continued with ``after = next_cursor`` until that is null;
these are ordered scans, not snapshots across concurrent writes. A record carries state,
attempts, retry time and provider evidence, never addresses, bodies or headers. The caller must
already have admitted an operator (the node's operator token).
"""

from __future__ import annotations

from pathlib import Path

from mailbox_actors.platform.storage.readonly import read_only, table_exists
from mailbox_actors.wire.carrier import (
    DeliveryRecord,
    InspectionAvailable,
    InspectionPage,
    InspectionUninitialized,
    ProviderRejection,
)
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "inspect_deliveries"]

DEFAULT_PAGE = 32
MAX_PAGE = 64
_SCAN = ("SELECT e.email_id, e.status, e.attempts, e.next_attempt_at_ms, e.provider_message_id, "
         "e.rejection_code, e.rejection_class, e.resolution, e.created_at_ms, e.updated_at_ms, "
         "(SELECT count(*) FROM email_messages m WHERE m.email_id = e.email_id), "
         "(SELECT count(*) FROM email_messages m WHERE m.email_id = e.email_id AND "
         "m.status = 'refused') FROM emails e WHERE e.email_id > ? ORDER BY e.email_id LIMIT ?")


def inspect_deliveries(path: Path, after: str | None = None,
                       limit: int = DEFAULT_PAGE) -> InspectionPage:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be 1..{MAX_PAGE}", details={"field": "limit"})
    if after is not None and not (0 < len(after) <= 64 and after.isascii()):
        raise InvalidRequest("after must be a cursor from an earlier page",
                             details={"field": "after"})
    with read_only(path) as conn:
        if conn is None:
            raise MailboxActorsError(ErrorCode.IDENTITY_NOT_FOUND,
                                     "no identity_mailbox object has been created here")
        if not table_exists(conn, "emails"):
            return InspectionUninitialized()
        rows = conn.execute(_SCAN, (after or "", limit + 1)).fetchall()
    records = [DeliveryRecord(
        email_id=r[0], status=r[1], attempts=r[2], next_attempt_at_ms=r[3],
        provider_message_id=r[4],
        provider_rejection=None if r[5] is None else ProviderRejection(r[5], r[6] or "permanent"),
        messages=r[10], refused_messages=r[11],
        resolved=bool(r[7]) and str(r[7]).startswith("operator:"),
        created_at_ms=r[8], updated_at_ms=r[9]) for r in rows[:limit]]
    more = len(rows) > limit
    return InspectionAvailable(records=records,
                               next_cursor=records[-1].email_id if more and records else None)
