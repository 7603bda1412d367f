"""The rows dispatch changes (CA-4, CA-5, CA-11): dispatch intent, and an attempt's outcome, each
inside the caller's transaction with its event (EV-1).

Intent is one guarded update, then the inline content read by key: the Email moves to
``dispatching`` only while it is still ``queued`` at the attempt its checks saw (its quota was
reserved for that attempt). An outcome is recorded against the row intent left, guarded the same
way (``move_if``), so the round that commits several outcomes reads none of them back.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import msgspec

from mailbox_actors.carrier import store
from mailbox_actors.carrier.store import EmailRow
from mailbox_actors.core.carrier.rejections import temporary_retry_at, unreachable_next
from mailbox_actors.core.carrier.states import EmailStatus, MessageStatus, can_move
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.transport import (
    OutboundEmail,
    OutcomeUnknown,
    ProviderAccepted,
    ProviderRejected,
    TransportOutcome,
    Unreachable,
)

if TYPE_CHECKING:
    from mailbox_actors.carrier.host import CarrierHost

__all__ = ["intent", "jitter", "record"]

# No RETURNING: the storage counts a write's rows read through ``sqlite_stmt`` when it returns
# rows (RT-13), a scan of every prepared statement that cost more than the update; the content is
# read after it by primary key instead.
_INTENT = ("UPDATE emails SET status = 'dispatching', updated_at_ms = ?, next_attempt_at_ms = NULL, "
           "lease_until_ms = ?, fresh = NULL WHERE seq = ? AND status = 'queued' AND attempts = ?")
_CONTENT = "SELECT content, content_parts FROM emails WHERE seq = ?"
_DEC = msgspec.msgpack.Decoder(OutboundEmail)
assert can_move(EmailStatus.QUEUED, EmailStatus.DISPATCHING)


def jitter(email_id: str, attempts: int) -> float:
    """A fraction in [0, 1) fixed per Email and attempt: retries spread without a random draw."""
    digest = hashlib.sha256(f"{email_id}/{attempts}".encode()).digest()
    return int.from_bytes(digest[:6], "big") / float(1 << 48)


def intent(host: CarrierHost, tx: SqlStorage, row: EmailRow, lease_ms: int | None,
           content: bytes | None = None) -> tuple[EmailRow, OutboundEmail | None] | None:
    """Dispatch intent: the Email as now stored and its content (to send once this commits), or
    None when it is no longer queued at ``row``'s attempt (cancelled, erased, sent meanwhile).
    ``content``: its inline content as read with ``row`` (None: read it here). An Email's content
    never changes while it stays queued at one attempt, which the guarded update checks."""
    now = tx.now_ms()
    lease = None if lease_ms is None else now + lease_ms
    if not tx.exec(_INTENT, now, lease, row.seq, row.attempts).rows_written:
        return None
    if content is not None and not row.content_parts:
        inline, parts = content, 0
    else:
        inline, parts = tx.exec(_CONTENT, row.seq).one()
    moved = msgspec.structs.replace(row, status=EmailStatus.DISPATCHING, updated_at_ms=now,
                                    next_attempt_at_ms=None, lease_until_ms=lease,
                                    content_parts=parts)
    if parts:
        email = store.load_content(tx, moved)
    else:
        email = None if inline is None else _DEC.decode(inline)
    host.emit(tx, "email.dispatching", {"email_id": row.email_id, "status": "dispatching",
                                       "attempt": row.attempts + 1})
    if lease is not None:
        host.wake(lease)  # the sweep that settles an unreported lease
    return moved, email


def record(host: CarrierHost, tx: SqlStorage, row: EmailRow, outcome: TransportOutcome,
           unreachable_window_ms: int) -> EmailRow | None:
    """Commit one attempt's outcome for ``row``, the Email intent left ``dispatching``; None when
    it is no longer so (erased meanwhile, say)."""
    if row.status != EmailStatus.DISPATCHING:
        return None
    email_id = row.email_id
    if isinstance(outcome, ProviderAccepted) and not outcome.refused:
        return _accepted(host, tx, row, outcome.provider_message_id[:200])
    if isinstance(outcome, Unreachable):
        return _unreachable(host, tx, row, outcome, unreachable_window_ms)
    refused = [] if isinstance(outcome, OutcomeUnknown) else list(outcome.refused)
    if refused:  # by position, as the transport was given them; positions outside are ignored
        count = tx.exec("SELECT count(*) FROM email_messages WHERE email_id = ?",
                        email_id).one()[0]
        refused = [r for r in refused if 0 <= r.index < count]
    moved: EmailRow | None
    only = MessageStatus.QUEUED  # the Messages that take ``after``
    if isinstance(outcome, ProviderAccepted):
        moved = store.move_if(host, tx, row, EmailStatus.PROVIDER_ACCEPTED,
                              {"refused_messages": len(refused)},
                              provider_message_id=outcome.provider_message_id[:200],
                              lease_until_ms=None)
        after = MessageStatus.UNCONFIRMED
    elif isinstance(outcome, ProviderRejected):
        attempts = row.attempts + 1
        code = outcome.code[:64]
        retry_at = (temporary_retry_at(attempts, tx.now_ms(), jitter(email_id, attempts))
                    if outcome.klass == "temporary" else None)
        info = {"attempts": attempts, "code": store.safe_code(code), "class": outcome.klass}
        if retry_at is not None:  # back to queued: the refusals of this attempt are not final
            moved = store.move_if(host, tx, row, EmailStatus.QUEUED,
                                  {**info, "next_attempt_at_ms": retry_at}, attempts=attempts,
                                  rejection_code=code, rejection_class=outcome.klass,
                                  next_attempt_at_ms=retry_at, lease_until_ms=None,
                                  unreachable_since_ms=None, unreachable_count=0)
            if moved is not None:
                host.wake(retry_at)
            after, only = MessageStatus.QUEUED, MessageStatus.REFUSED
        else:
            moved = store.move_if(host, tx, row, EmailStatus.REJECTED, info, attempts=attempts,
                                  rejection_code=code, rejection_class=outcome.klass,
                                  lease_until_ms=None)
            after = MessageStatus.NOT_SENT
    else:
        moved = store.move_if(host, tx, row, EmailStatus.OUTCOME_UNKNOWN,
                              {"reason": store.safe_code(outcome.reason) or "unknown"},
                              lease_until_ms=None)
        after = MessageStatus.UNKNOWN
    if moved is None:
        return None
    now = tx.now_ms()
    for r in refused:
        tx.exec("UPDATE email_messages SET status = ?, code = ?, updated_at_ms = ? "
                "WHERE email_id = ? AND position = ?", MessageStatus.REFUSED.value, r.code[:64],
                now, email_id, r.index)
    store.set_messages(tx, email_id, after, only=[only])
    return moved


def _unreachable(host: CarrierHost, tx: SqlStorage, row: EmailRow, outcome: Unreachable,
                 window_ms: int) -> EmailRow | None:
    """CA-16: the provider could not have had the message. Not a rejection: ``attempts`` and the
    rejection evidence stay; the Email is queued again with backoff, and ends ``expired``
    (provider_unreachable) once ``window_ms`` has passed since the first failure in a row."""
    now = tx.now_ms()
    kind = store.safe_code(outcome.failure) or "unreachable"
    since = row.unreachable_since_ms if row.unreachable_since_ms is not None else now
    failures = row.unreachable_count + 1
    retry_at = unreachable_next(failures, since, now, window_ms, jitter(row.email_id, -failures))
    seen = {"unreachable_since_ms": since, "unreachable_count": failures, "failure_kind": kind,
            "failure_at_ms": now, "lease_until_ms": None}
    moved = store.move_if(host, tx, row, EmailStatus.QUEUED,
                          {"reason": "provider_unreachable", "failure": kind,
                           "next_attempt_at_ms": retry_at}, next_attempt_at_ms=retry_at, **seen)
    if moved is None:
        return None
    if retry_at is None:  # back in the queue, and past its window there: expired
        moved = store.move(host, tx, moved, EmailStatus.EXPIRED,
                           {"reason": "provider_unreachable", "failure": kind})
        store.set_messages(tx, row.email_id, MessageStatus.NOT_SENT, only=[MessageStatus.QUEUED])
    else:
        host.wake(retry_at)
    return moved


# An acceptance with every recipient taken, dispatch's common outcome, written out: the same
# update, event and Messages as ``store.move_if`` and ``store.set_messages`` make for it, with
# the statements' text fixed instead of composed for each Email.
_ACCEPTED = ("UPDATE emails SET status = 'provider_accepted', updated_at_ms = ?, "
             "provider_message_id = ?, lease_until_ms = NULL, content = NULL, content_parts = 0 "
             "WHERE seq = ? AND status = 'dispatching'")
_UNCONFIRMED = ("UPDATE email_messages SET status = 'unconfirmed', updated_at_ms = ? "
                "WHERE email_id = ? AND status = 'queued'")
assert can_move(EmailStatus.DISPATCHING, EmailStatus.PROVIDER_ACCEPTED)
assert (MessageStatus.UNCONFIRMED.value, MessageStatus.QUEUED.value) == ("unconfirmed", "queued")


def _accepted(host: CarrierHost, tx: SqlStorage, row: EmailRow,
              provider_message_id: str) -> EmailRow | None:
    now = tx.now_ms()
    if not tx.exec(_ACCEPTED, now, provider_message_id, row.seq).rows_written:
        return None  # no longer dispatching (erased meanwhile, say)
    store.drop_content(tx, row)
    host.emit(tx, "email.provider_accepted", {"email_id": row.email_id,
                                             "status": "provider_accepted",
                                             "refused_messages": 0})
    tx.exec(_UNCONFIRMED, now, row.email_id)
    return msgspec.structs.replace(row, status=EmailStatus.PROVIDER_ACCEPTED, updated_at_ms=now,
                                   provider_message_id=provider_message_id,
                                   lease_until_ms=None, content_parts=0)
