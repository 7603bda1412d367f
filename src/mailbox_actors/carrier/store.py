"""Carrier's tables (CA-1..CA-4): the schema, receipts from rows, content kept
in chunks until the Email is terminal, and every status change with its outbox event.

A status change goes through ``move`` (the transition table is ``core.carrier.states``'s), inside
the caller's transaction, so the change and its event commit together (EV-1). Events carry ids,
statuses and codes only (EV-5). Recipient addresses are stored only as keyed digests (the cap's
and bounce matching's key); content leaves with ``drop_content``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from mailbox_actors.carrier import keys as carrier_keys
from mailbox_actors.core.carrier.addresses import normalize
from mailbox_actors.core.carrier.states import EmailStatus, MessageStatus, can_move
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.carrier import MessageReceipt, ProviderRejection, Receipt, TransportFailure
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.transport import OutboundEmail

if TYPE_CHECKING:
    from mailbox_actors.carrier.host import CarrierHost

__all__ = ["EmailRow",
           "drop_content", "email_id_of_header", "encode_content", "insert_messages", "load_content",
           "move", "move_if", "recipient_key", "receipt", "row_by_id", "row_by_seq", "row_by_source",
           "rows_and_content_where", "rows_where",
           "safe_code", "save_chunks", "set_messages"]


_CHUNK = 1_000_000  # under the storage's value limit (RT-7): 5 MiB of content is six rows
_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder(OutboundEmail)
_COLUMNS = ("email_id, source_id, digest, status, message_id_header, attempts, "
            "provider_message_id, rejection_code, rejection_class, next_attempt_at_ms, "
            "send_before, lease_until_ms, resolution, created_at_ms, updated_at_ms, "
            "content_parts, seq, unreachable_since_ms, unreachable_count, failure_kind, "
            "failure_at_ms")


class EmailRow(msgspec.Struct, frozen=True):
    email_id: str
    source_id: str
    digest: str
    status: EmailStatus
    message_id_header: str
    attempts: int
    provider_message_id: str | None
    rejection_code: str | None
    rejection_class: str | None
    next_attempt_at_ms: int | None
    send_before: int | None
    lease_until_ms: int | None
    resolution: str | None
    created_at_ms: int
    updated_at_ms: int
    content_parts: int  # chunks in email_content (0: the content is inline, or gone)
    seq: int  # the row's key (``carrier_keys``): every update of the Email names it
    # CA-16: the provider unreachable since (this run of failures), how often, and the last one.
    unreachable_since_ms: int | None = None
    unreachable_count: int = 0
    failure_kind: str | None = None
    failure_at_ms: int | None = None


def _row(values: Sequence[Any]) -> EmailRow:
    v = list(values)
    v[3] = EmailStatus(v[3])
    return EmailRow(*v)


def row_by_source(sql: SqlStorage, source_id: str) -> EmailRow | None:
    rows = sql.exec(f"SELECT {_COLUMNS} FROM emails WHERE source_id = ?", source_id).all()
    return _row(rows[0]) if rows else None


def row_by_id(sql: SqlStorage, email_id: str) -> EmailRow | None:
    """The Email by its id, through its first Message's key (``carrier_keys``)."""
    rows = sql.exec(f"SELECT {_COLUMNS} FROM emails WHERE seq = (SELECT email_seq FROM "
                    "email_messages WHERE email_id = ?1 AND position = 0) AND email_id = ?1",
                    email_id).all()
    return _row(rows[0]) if rows else None


def row_by_seq(sql: SqlStorage, seq: int) -> EmailRow | None:
    rows = sql.exec(f"SELECT {_COLUMNS} FROM emails WHERE seq = ?", seq).all()
    return _row(rows[0]) if rows else None


def rows_where(sql: SqlStorage, where: str, *params: Any) -> list[EmailRow]:
    return [_row(r) for r in sql.exec(f"SELECT {_COLUMNS} FROM emails WHERE {where}", *params)]


def rows_and_content_where(sql: SqlStorage, where: str, *params: Any
                           ) -> list[tuple[EmailRow, bytes | None]]:
    """``rows_where`` with each row's inline content when it is at most 64 KiB (else None):
    dispatch reads its due Emails' content ahead with them instead of one read at each intent."""
    return [(_row(r[:-1]), r[-1]) for r in sql.exec(
        f"SELECT {_COLUMNS}, CASE WHEN length(content) <= 65536 THEN content END FROM emails "
        f"WHERE {where}", *params)]


def email_id_of_header(header: str) -> str | None:
    """The email id a stamped Message-ID names (``<eml_...@domain>``, see ``carrier.submit``), so
    a bounce that quotes it finds its Email without an index on the header."""
    local = header.strip().lstrip("<").split("@", 1)[0]
    if not local.startswith("eml_") or len(local) > 64:
        return None
    return "eml_" + local[4:].upper()


def recipient_key(address: str) -> str:
    """The stored stand-in for a recipient address: a digest of its normalized form."""
    return hashlib.sha256(b"carrier-recipient:" + normalize(address).encode()).hexdigest()[:32]


def receipt(sql: SqlStorage, row: EmailRow) -> Receipt:
    msgs = sql.exec("SELECT message_id, role, status, code FROM email_messages "
                    "WHERE email_id = ? ORDER BY position", row.email_id).all()
    rejection = None if row.rejection_code is None else ProviderRejection(
        code=row.rejection_code, klass=row.rejection_class or "permanent")  # type: ignore[arg-type]
    return Receipt(
        email_id=row.email_id, source_id=row.source_id, status=row.status.value,
        message_id_header=row.message_id_header,
        messages=[MessageReceipt(m[0], m[1], m[2], m[3]) for m in msgs],
        attempts=row.attempts, provider_message_id=row.provider_message_id,
        provider_rejection=rejection, next_attempt_at_ms=row.next_attempt_at_ms,
        created_at_ms=row.created_at_ms, updated_at_ms=row.updated_at_ms,
        last_transport_failure=None if row.failure_kind is None or row.failure_at_ms is None
        else TransportFailure(row.failure_kind, row.failure_at_ms))


# Messages per INSERT: four parameters each and three shared stay under the bound-parameter
# limit of 100 (RT-7), so an Email of up to 24 recipients takes one statement.
_MESSAGES_PER_INSERT = 24


@functools.lru_cache(maxsize=256)
def _insert_messages(first: int, count: int) -> str:
    """Rows for positions first..first+count-1: ?1 the email id, ?2 now, ?3 the Messages'
    status; then message id, role, key and code per row. Each names its Email's seq as the
    Email's INSERT just left it (``last_insert_rowid()``: Messages are WITHOUT ROWID, so their
    own inserts do not change it)."""
    rows = ", ".join(
        f"(?{4 + 4 * j}, ?1, {first + j}, ?{5 + 4 * j}, ?{6 + 4 * j}, ?3, ?{7 + 4 * j}, ?2, ?2, "
        "last_insert_rowid())" for j in range(count))
    return ("INSERT INTO email_messages (message_id, email_id, position, role, recipient_key, "
            f"status, code, created_at_ms, updated_at_ms, email_seq) VALUES {rows}")


_QUEUED = MessageStatus.QUEUED.value  # plain strings: an enum's .value is a call each time
_NOT_SENT = MessageStatus.NOT_SENT.value


def insert_messages(tx: SqlStorage, email_id: str, message_ids: Sequence[str],
                    recipients: Sequence[tuple[str, str]], keys: Sequence[str],
                    over: Collection[str], now: int) -> list[MessageReceipt]:
    """The Email's Messages (queued; all not_sent, those over the cap coded so, when ``over``
    names any address), in as few statements as the parameter limit allows; called right
    after the Email's own INSERT. A Message id minted far from its Email's (a millisecond
    passed between them) is listed, so ``carrier_keys.find_message`` finds it."""
    status = _NOT_SENT if over else _QUEUED
    out: list[MessageReceipt] = []
    params: list[Any] = []
    email_value = carrier_keys.minted_value(email_id)
    far: list[tuple[str, int]] = []
    for message_id, (role, _address), key in zip(message_ids, recipients, keys, strict=True):
        if not carrier_keys.derived(email_value, message_id):
            far.append((message_id, len(out)))
        code = "recipient_cap" if key in over else None
        params += (message_id, role, key, code)
        out.append(MessageReceipt(message_id, role, status, code))  # type: ignore[arg-type]
    for first in range(0, len(out), _MESSAGES_PER_INSERT):
        count = min(_MESSAGES_PER_INSERT, len(out) - first)
        tx.exec(_insert_messages(first, count), email_id, now, status,
                *params[4 * first:4 * (first + count)])
    for message_id, position in far:
        tx.exec("INSERT INTO email_message_ids (message_id, email_id, position) VALUES (?, ?, ?)",
                message_id, email_id, position)
    return out


def encode_content(email: OutboundEmail) -> tuple[bytes | None, list[bytes]]:
    """(the inline content, or None; the chunks of content too large to be inline)."""
    data = _ENC.encode(email)
    if len(data) <= _CHUNK:
        return data, []
    return None, [data[start:start + _CHUNK] for start in range(0, len(data), _CHUNK)]


def save_chunks(tx: SqlStorage, email_id: str, chunks: list[bytes]) -> None:
    for part, chunk in enumerate(chunks):
        tx.exec("INSERT INTO email_content (email_id, part, chunk) VALUES (?, ?, ?)",
                email_id, part, chunk)


def load_content(sql: SqlStorage, row: EmailRow) -> OutboundEmail | None:
    if not row.content_parts:
        inline = sql.exec("SELECT content FROM emails WHERE seq = ?", row.seq).all()
        return _DEC.decode(inline[0][0]) if inline and inline[0][0] is not None else None
    rows = sql.exec("SELECT chunk FROM email_content WHERE email_id = ? ORDER BY part",
                    row.email_id).all()
    return _DEC.decode(b"".join(r[0] for r in rows)) if rows else None


def drop_content(tx: SqlStorage, row: EmailRow) -> None:
    """Only for content in chunks: ``move`` clears inline content in its own update."""
    if row.content_parts:
        tx.exec("DELETE FROM email_content WHERE email_id = ?", row.email_id)


def set_messages(tx: SqlStorage, email_id: str, status: MessageStatus,
                 only: Sequence[MessageStatus] | None = None) -> None:
    """Move the Email's Messages to ``status`` (those now in ``only``, when given)."""
    now = tx.now_ms()
    if only is None:
        tx.exec("UPDATE email_messages SET status = ?, updated_at_ms = ? WHERE email_id = ?",
                status.value, now, email_id)
        return
    marks = ", ".join("?" for _ in only)
    tx.exec(f"UPDATE email_messages SET status = ?, updated_at_ms = ? WHERE email_id = ? AND "
            f"status IN ({marks})", status.value, now, email_id, *(s.value for s in only))


def safe_code(code: str | None) -> str | None:
    """A code as events may carry it: short, and never something that looks like an address."""
    if code is None:
        return None
    code = code[:64]
    return None if "@" in code else code


_SETTABLE = frozenset({"attempts", "provider_message_id", "rejection_code", "rejection_class",
                       "next_attempt_at_ms", "lease_until_ms", "resolution", "content",
                       "content_parts", "unreachable_since_ms", "unreachable_count",
                       "failure_kind", "failure_at_ms"})


def move(host: CarrierHost, tx: SqlStorage, row: EmailRow, to: EmailStatus,
         event: dict[str, Any] | None = None, **fields: Any) -> EmailRow:
    """Change the Email's status (a transition ``states`` allows), set ``fields``, drop content
    when it becomes terminal, and emit ``email.<status>`` with ``event`` (ids and codes only).
    ``row`` was read in this transaction."""
    moved = move_if(host, tx, row, to, event, **fields)
    if moved is None:
        raise MailboxActorsError(ErrorCode.CONFLICT, "the email changed meanwhile",
                                 details={"status": row.status.value})
    return moved


def move_if(host: CarrierHost, tx: SqlStorage, row: EmailRow, to: EmailStatus,
            event: dict[str, Any] | None = None, **fields: Any) -> EmailRow | None:
    """``move``, for a ``row`` read earlier: None (nothing changed, nothing emitted) when the
    stored Email is no longer in ``row``'s status, or is gone."""
    if not can_move(row.status, to):
        raise MailboxActorsError(ErrorCode.CONFLICT, f"the email is {row.status.value}; it cannot "
                                 f"become {to.value}", details={"status": row.status.value})
    assert set(fields) <= _SETTABLE, fields
    now = tx.now_ms()
    terminal = to not in (EmailStatus.QUEUED, EmailStatus.DISPATCHING)
    if terminal:
        fields = {**fields, "content": None, "content_parts": 0}
    sets = ", ".join(f"{k} = ?" for k in fields)
    if not tx.exec(f"UPDATE emails SET status = ?, updated_at_ms = ?{', ' if sets else ''}{sets} "
                   "WHERE seq = ? AND status = ?", to.value, now, *fields.values(),
                   row.seq, row.status.value).rows_written:
        return None
    if terminal:
        drop_content(tx, row)
    fields.pop("content", None)
    kind = "requeued" if to == EmailStatus.QUEUED else to.value  # a temporary rejection
    host.emit(tx, f"email.{kind}", {"email_id": row.email_id, "status": to.value, **(event or {})})
    return msgspec.structs.replace(row, status=to, updated_at_ms=now, **fields)
