"""Carrier's request ops (CA-1, CA-2, CA-6, CA-9, CA-12, CA-13): ``submit``,
``get_email``, ``cancel``, ``resolve`` and ``apply_delivery_event``.

``submit`` validates first (nothing is stored for a bad request), then in one transaction stores
the Email, its Messages, its content and the dispatch wake: ``queued`` means durable local
acceptance and nothing more. Over the per-recipient cap it durably records ``refused`` instead.
Dispatch itself is ``dispatch``'s.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

import msgspec

from mailbox_actors.carrier import keys as carrier_keys
from mailbox_actors.carrier import store
from mailbox_actors.carrier.checks import check_submit
from mailbox_actors.core.carrier.cap import full_at, over_cap, window_start
from mailbox_actors.core.carrier.digest import content_digest
from mailbox_actors.core.carrier.states import (
    COUNTED_BY_CAP,
    DELIVERY_RANK,
    EmailStatus,
    MessageStatus,
    delivery_moves,
)
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.carrier import (
    ApplyDeliveryEvent,
    CancelEmail,
    DeliveryEventReply,
    GetEmail,
    LearnMessageId,
    LearnMessageIdReply,
    Receipt,
    ResolveEmail,
    Submit,
)
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.transport import OutboundEmail

if TYPE_CHECKING:
    from mailbox_actors.carrier.state import CarrierState

__all__ = ["apply_delivery_event", "cancel", "get_email", "learn_message_id",
           "resolve", "stamped_ids", "submit", "submit_in"]

_COUNTED = ", ".join(f"'{s.value}'" for s in sorted(COUNTED_BY_CAP))
# The Messages of each address that count toward the cap (CA-6), in the window.
_CAP_ROWS = ("FROM email_messages m JOIN emails e ON e.seq = m.email_seq "
             "WHERE m.recipient_key IN ({keys}) AND m.created_at_ms > ? "
             f"AND e.status IN ({_COUNTED}) GROUP BY m.recipient_key")
_CAP_COUNT = "SELECT m.recipient_key, count(DISTINCT m.email_id) " + _CAP_ROWS
# The Email's row as queued, in one statement that inserts nothing when the source id exists or
# an address may be at the cap: one with full_at Messages or more in the window, whatever their
# Emails' status (an index-only look at the cap's index, stopping at the full_at-th; Messages
# bound the Emails counted from above). No RETURNING, so the common case reads nothing back.
# Parameters: ?1..?10 id, source id, digest, header, next attempt, send_before, created,
# updated, content, content parts; ?11 window start, ?12 full_at; then one per address.
_COLUMNS = ("email_id, source_id, digest, status, message_id_header, next_attempt_at_ms, "
            "send_before, created_at_ms, updated_at_ms, content, content_parts, fresh")
_MAY_BE_FULL = ("EXISTS (SELECT 1 FROM email_messages WHERE recipient_key = ?{n} AND "
                "created_at_ms > ?11 LIMIT 1 OFFSET ?12 - 1)")
# An Email written as the cap's rule decided, once the quick look above could not.
_INSERT = (f"INSERT INTO emails ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


@functools.lru_cache(maxsize=64)
def _insert_queued(keys: int) -> str:
    full = " OR ".join(_MAY_BE_FULL.format(n=12 + i) for i in range(1, keys + 1))
    return (f"INSERT INTO emails ({_COLUMNS}) SELECT ?1, ?2, ?3, 'queued', ?4, ?5, ?6, ?7, ?8, "
            f"?9, ?10, 1 WHERE NOT ({full}) ON CONFLICT (source_id) DO NOTHING")


def _not_found(field: str = "source_id") -> MailboxActorsError:
    return MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, f"no email with this {field}")


def _message_id_header(email_id: str, from_: str) -> str:
    return f"<{email_id.lower()}@{_header_domain(from_)}>"


@functools.lru_cache(maxsize=64)
def _header_domain(from_: str) -> str:
    """The Message-ID's domain for a sender (an identity sends from the same few addresses
    again and again, so each is worked out once; as many as ``check_submit`` keeps)."""
    domain = from_.rsplit("@", 1)[1]
    if domain.startswith("[") or not domain.isascii():
        return "mailbox-actors.invalid"  # a literal or an IDN: keep the header plain ASCII
    return domain.lower()


def submit(c: CarrierState, req: Submit) -> Receipt:
    check_submit(req)
    digest = content_digest(from_=req.from_, to=req.to, cc=req.cc, bcc=req.bcc,
                            subject=req.subject, text=req.text, html=req.html,
                            headers=req.headers, send_before=req.send_before)
    receipt, wake = c.host.commit(lambda tx: _submit_tx(c, tx, req, digest))
    if wake is not None:
        c.wake.committed(wake)
    return receipt


def submit_in(c: CarrierState, tx: SqlStorage, req: Submit) -> Receipt:
    """``submit`` inside the caller's transaction (the Email and its wake commit with the
    caller's own change). The wake is not remembered as committed: the caller commits it."""
    check_submit(req)
    digest = content_digest(from_=req.from_, to=req.to, cc=req.cc, bcc=req.bcc,
                            subject=req.subject, text=req.text, html=req.html,
                            headers=req.headers, send_before=req.send_before)
    return _submit_tx(c, tx, req, digest)[0]


# The statuses a submit writes, as the plain strings they are stored and answered as (an
# enum member's ``.value`` costs a descriptor call each time).
_QUEUED = EmailStatus.QUEUED.value
_REFUSED = EmailStatus.REFUSED.value


def _submit_tx(c: CarrierState, tx: SqlStorage, req: Submit, digest: str
               ) -> tuple[Receipt, int | None]:
    """The receipt, and the dispatch wake this transaction ensured (None: it ensured none)."""
    host = c.host
    now = tx.now_ms()
    recipients = _recipients(req)
    keys = [store.recipient_key(a) for _, a in recipients]
    unique = list(dict.fromkeys(keys)) if len(keys) > 1 else keys
    policy = c.cap
    email_id = host.new_id("eml")
    # Minted next to the Email's id, so they fall within its millisecond (carrier_keys).
    message_ids = [host.new_id("msg") for _ in recipients]
    header = _message_id_header(email_id, req.from_)
    inline, chunks = store.encode_content(OutboundEmail(
        email_id=email_id, message_id_header=header, from_=req.from_, to=req.to, cc=req.cc,
        bcc=req.bcc, subject=req.subject, text=req.text, html=req.html, headers=req.headers))
    # One statement: the Email as queued, unless the source id exists (a replay, compared
    # below) or an address may be at the cap (then the rule decides, from the counts).
    start = window_start(policy, now)
    over: set[str] = set()
    if not tx.exec(_insert_queued(len(unique)), email_id, req.source_id, digest, header, now,
                   req.send_before, now, now, inline, len(chunks), start, full_at(policy),
                   *unique).rows_written:
        existing = store.row_by_source(tx, req.source_id)
        if existing is not None:
            return _replay(tx, existing, digest), None
        counted = {k: n for k, n in tx.exec(
            _CAP_COUNT.format(keys=", ".join("?" for _ in unique)), *unique, start)}
        over = set(over_cap(policy, keys, counted))
        if over:  # the refused Email keeps no content and is never due
            tx.exec(_INSERT, email_id, req.source_id, digest, _REFUSED, header,
                    None, req.send_before, now, now, None, 0, None)
        else:
            tx.exec(_INSERT, email_id, req.source_id, digest, _QUEUED, header,
                    now, req.send_before, now, now, inline, len(chunks), 1)
    status = _REFUSED if over else _QUEUED
    # Right after the Email's INSERT: the Messages take its seq from it (carrier_keys).
    messages = store.insert_messages(tx, email_id, message_ids, recipients, keys, over, now)
    if chunks and not over:
        store.save_chunks(tx, email_id, chunks)
    wake = None
    if over:
        host.emit(tx, "email.refused", {"email_id": email_id, "status": status,
                                       "reason": "recipient_cap", "messages": len(recipients)})
    else:
        host.emit(tx, "email.queued", {"email_id": email_id, "status": status,
                                      "messages": len(recipients)})
        # Without a transport the wake is the periodic look (a node restarted with one sends).
        wake = c.wake.ensure(host, now if c.transport is not None
                             else now + c.settings.recheck_ms)
    return Receipt(
        email_id=email_id, source_id=req.source_id, status=status,
        message_id_header=header, messages=messages, attempts=0, provider_message_id=None,
        provider_rejection=None, next_attempt_at_ms=None if over else now, created_at_ms=now,
        updated_at_ms=now), wake


def _recipients(req: Submit) -> list[tuple[str, str]]:
    """(role, address) in Message order: to, then cc, then bcc (most Emails have no cc or bcc;
    a nested comprehension over the three roles cost three times this)."""
    out = [("to", a) for a in req.to]
    if req.cc:
        out += [("cc", a) for a in req.cc]
    if req.bcc:
        out += [("bcc", a) for a in req.bcc]
    return out


def _replay(tx: SqlStorage, existing: store.EmailRow, digest: str) -> Receipt:
    if existing.digest != digest:
        raise MailboxActorsError(
            ErrorCode.CONFLICT, "this source_id was submitted with other content, envelope, "
            "headers or expiry", details={"email_id": existing.email_id},
            fix="Replay with identical content, or submit under a new source_id.")
    return store.receipt(tx, existing)  # a replay: the same receipt, nothing sent again


def get_email(c: CarrierState, req: GetEmail) -> Receipt | None:
    row = store.row_by_source(c.sql, req.source_id)
    return None if row is None else store.receipt(c.sql, row)


def cancel(c: CarrierState, req: CancelEmail) -> Receipt:
    def run(tx: SqlStorage) -> Receipt:
        row = store.row_by_source(tx, req.source_id)
        if row is None:
            raise _not_found()
        if row.status == EmailStatus.SUPERSEDED and row.resolution == "cancelled":
            return store.receipt(tx, row)  # cancelled already: the same answer
        if row.status != EmailStatus.QUEUED:
            raise MailboxActorsError(
                ErrorCode.CONFLICT, f"the email is {row.status.value}: only a queued email (before "
                "dispatch intent) can be cancelled", details={"status": row.status.value})
        row = store.move(c.host, tx, row, EmailStatus.SUPERSEDED, {"reason": "cancelled"},
                         next_attempt_at_ms=None, resolution="cancelled")
        store.set_messages(tx, row.email_id, MessageStatus.NOT_SENT)
        return store.receipt(tx, row)
    return c.host.commit(run)


def resolve(c: CarrierState, req: ResolveEmail) -> Receipt:
    if (req.source_id is None) == (req.email_id is None):
        raise InvalidRequest("resolve names the email by source_id or by email_id (one of them)",
                             details={"field": "source_id"})
    if req.outcome == "provider_accepted" and req.provider_message_id is None:
        raise InvalidRequest("provider_accepted needs provider_message_id",
                             details={"field": "provider_message_id"})
    if req.outcome == "rejected" and req.code is None:
        raise InvalidRequest("rejected needs code", details={"field": "code"})
    evidence = f"operator:{req.evidence}"

    def run(tx: SqlStorage) -> Receipt:
        row = (store.row_by_source(tx, req.source_id) if req.source_id is not None
               else store.row_by_id(tx, str(req.email_id)))
        if row is None:
            raise _not_found("source_id" if req.source_id is not None else "email_id")
        if row.resolution == evidence and row.status.value == req.outcome:
            return store.receipt(tx, row)  # the same settlement again
        if row.status != EmailStatus.OUTCOME_UNKNOWN:
            raise MailboxActorsError(
                ErrorCode.CONFLICT, f"the email is {row.status.value}: resolve settles only "
                "outcome_unknown", details={"status": row.status.value})
        if req.outcome == "provider_accepted":
            row = store.move(c.host, tx, row, EmailStatus.PROVIDER_ACCEPTED, {"resolved": True},
                             provider_message_id=req.provider_message_id, resolution=evidence)
            store.set_messages(tx, row.email_id, MessageStatus.UNCONFIRMED,
                               only=[MessageStatus.UNKNOWN])
        else:
            row = store.move(c.host, tx, row, EmailStatus.REJECTED,
                             {"resolved": True, "code": store.safe_code(req.code),
                              "class": "permanent"},
                             rejection_code=req.code, rejection_class="permanent",
                             resolution=evidence)
            store.set_messages(tx, row.email_id, MessageStatus.NOT_SENT,
                               only=[MessageStatus.UNKNOWN])
        return store.receipt(tx, row)
    return c.host.commit(run)


_NEWS = {("delivered", None): MessageStatus.DELIVERED, ("deferred", None): MessageStatus.DEFERRED,
         ("complained", None): MessageStatus.COMPLAINED,
         ("bounced", "hard"): MessageStatus.BOUNCED_HARD,
         ("bounced", "soft"): MessageStatus.BOUNCED_SOFT}


def apply_delivery_event(c: CarrierState, req: ApplyDeliveryEvent) -> DeliveryEventReply:
    news = _NEWS.get((req.type, req.bounce))
    if news is None:
        raise InvalidRequest("bounced needs bounce 'hard' or 'soft'; other types take no bounce",
                             details={"field": "bounce"})
    if req.message_id is None and (req.message_id_header is None or req.recipient is None):
        raise InvalidRequest("name the message: message_id, or message_id_header and recipient",
                             details={"field": "message_id"})
    if req.provider_event_id is None and req.provider_timestamp_ms is None:
        raise InvalidRequest("an event without provider_event_id needs provider_timestamp_ms "
                             "(it is deduplicated on them)", details={"field": "provider_event_id"})

    def run(tx: SqlStorage) -> DeliveryEventReply:
        found: tuple[str, str, str] | None
        if req.message_id is not None:
            found = carrier_keys.find_message(tx, req.message_id)
        else:
            header = req.message_id_header or ""
            email_id = store.email_id_of_header(header)
            if email_id is None:  # a Message-ID the provider gave it (CA-17)
                learned = tx.exec("SELECT email_id, stamped FROM email_learned_ids WHERE "
                                  "learned = ?", _bare(header)).all()
                if learned:
                    email_id, header = learned[0][0], f"<{learned[0][1]}>"
            rows = tx.exec("SELECT m.message_id, m.email_id, m.status FROM email_messages m JOIN "
                           "emails e ON e.seq = m.email_seq WHERE m.email_id = ? AND "
                           "e.message_id_header = ? AND m.recipient_key = ? "
                           "ORDER BY m.position LIMIT 1", email_id or "", header,
                           store.recipient_key(req.recipient or "")).all()
            found = (rows[0][0], rows[0][1], rows[0][2]) if rows else None
        if found is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no such message",
                                     details={"field": "message_id"})
        message_id, email_id, current = found[0], found[1], MessageStatus(found[2])
        if current not in DELIVERY_RANK:
            raise MailboxActorsError(
                ErrorCode.CONFLICT, f"the message is {current.value}: it never reached the "
                "provider", details={"status": current.value})
        key = (f"p:{req.provider_event_id}" if req.provider_event_id is not None else
               f"t:{message_id}:{news.value}:{req.provider_timestamp_ms}")
        now = tx.now_ms()
        fresh = tx.exec("INSERT OR IGNORE INTO delivery_events (dedupe_key, message_id, type, "
                        "applied_at_ms) VALUES (?, ?, ?, ?)", key, message_id, news.value,
                        now).rows_written
        if not fresh:
            return DeliveryEventReply(message_id, current.value, changed=False, duplicate=True)
        changed = delivery_moves(current, news)
        if changed:  # by the Messages' key: the message id has no index of its own
            tx.exec("UPDATE email_messages SET status = ?, code = ?, updated_at_ms = ? "
                    "WHERE email_id = ? AND message_id = ?", news.value, req.code, now, email_id,
                    message_id)
        c.host.emit(tx, f"email.message_{news.value}", {
            "email_id": email_id, "message_id": message_id, "changed": changed,
            "code": store.safe_code(req.code)})
        return DeliveryEventReply(message_id, (news if changed else current).value,
                                  changed=changed, duplicate=False)
    return c.host.commit(run)


_MSG_ID = re.compile(r"[^<>\s@]+@[^<>\s@]+")


def _bare(message_id: str) -> str:
    """A Message-ID without its angle brackets and surrounding space."""
    return message_id.strip().removeprefix("<").removesuffix(">").strip()


def learn_message_id(c: CarrierState, req: LearnMessageId) -> LearnMessageIdReply:
    """CA-17: the provider's Message-ID for the Email, recorded once (the same again changes
    nothing; another is ``conflict``), with its ``email.message_id_learned`` event."""
    learned = _bare(req.message_id)
    if not _MSG_ID.fullmatch(learned):
        raise InvalidRequest("message_id is not a Message-ID (local@domain, brackets optional)",
                             details={"field": "message_id"})

    def run(tx: SqlStorage) -> LearnMessageIdReply:
        row = store.row_by_id(tx, req.email_id)
        if row is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no email with this email_id",
                                     details={"field": "email_id"})
        stamped = _bare(row.message_id_header)
        known = tx.exec("SELECT learned FROM email_learned_ids WHERE email_id = ?",
                        row.email_id).all()
        reply = LearnMessageIdReply(email_id=row.email_id, message_id_header=row.message_id_header,
                                    learned_message_id=f"<{learned}>", changed=not known)
        if known and known[0][0] == learned:
            return reply
        if known:
            raise MailboxActorsError(
                ErrorCode.CONFLICT, "the email has learnt another Message-ID already",
                details={"field": "message_id"},
                fix="A provider gives one final Message-ID per Email; check the journal copy.")
        if learned == stamped:  # the provider kept ours: nothing to learn, nothing to map
            return msgspec.structs.replace(reply, changed=False)
        taken = tx.exec("SELECT email_id FROM email_learned_ids WHERE learned = ?", learned).all()
        if taken:
            raise MailboxActorsError(ErrorCode.CONFLICT, "another email has this Message-ID",
                                     details={"field": "message_id"})
        tx.exec("INSERT INTO email_learned_ids (learned, email_id, stamped) VALUES (?, ?, ?)",
                learned, row.email_id, stamped)
        c.host.emit(tx, "email.message_id_learned", {"email_id": row.email_id})
        return reply
    return c.host.commit(run)


def stamped_ids(sql: SqlStorage, ids: list[str]) -> dict[str, str]:
    """Of ``ids`` (Message-IDs without brackets), those a provider gave an Email here, each with
    the id the Email was stamped with (CA-17: threading and bounces treat them as one)."""
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    return {str(r[0]): str(r[1]) for r in sql.exec(
        f"SELECT learned, stamped FROM email_learned_ids WHERE learned IN ({marks})", *ids)}
