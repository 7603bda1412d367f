"""Parsing received mail again (IN-8): ``reparse {message_id}`` or ``{all: true}``.

Ingest keeps each message's raw source (``raw_chunks``: ``sources.py``, UI-2). A reparse reads it
back and parses it with the current parser (after a parser fix): the message's
parsed fields, defects, attachments and search index are replaced in place, in one transaction.
Ids never change and the message stays in its thread (a thread never splits); the threads its
new keys (its own Message-ID, In-Reply-To, References, Thread-Index) reach merge with its own as
they would have had it arrived with them (IN-11: the older id survives, the younger becomes its
alias, ``thread.merged``), and the keys nothing holds yet are mapped, so replies that arrive later
join it. ``all`` goes in pages of ``PAGE`` messages from
``alarm:reparse``, its position kept in ``meta`` with each page, so a crash resumes where it
stopped; a repeated reparse changes nothing more. A deleted message (its source went with it)
cannot be reparsed: ``conflict``; messages stored before sources were kept are passed over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.core.inbound.parse import ParsedMessage, parse_message
from mailbox_actors.core.inbound.threads import thread_keys
from mailbox_actors.objects.identity_mailbox import search, sources, threads
from mailbox_actors.objects.identity_mailbox.inbound_rows import DETAIL_ENCODER, StoredDetail
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.inbound import AttachmentView
from mailbox_actors.wire.search import Reparse, ReparseReply

if TYPE_CHECKING:
    from mailbox_actors.runtime.context import ActorContext

__all__ = ["PAGE", "PURPOSE", "erase", "reparse", "run_page"]

PURPOSE = "reparse"
PAGE = 50  # messages one transaction of ``all`` parses again
_CHUNK = 1 << 20  # attachment bytes per row, as ingest stores them (under RT-7's 2 MB)
_CURSOR = "reparse_after_seq"  # meta: the last seq ``all`` has done (absent: no run going)
_ENC = msgspec.msgpack.Encoder()


def _source(sql: SqlStorage, message_id: str) -> bytes | None:
    return sources.raw_of(sources.actor_rows(sql), message_id)


def reparse(ctx: ActorContext, sql: SqlStorage, lim: InboundLimits, req: Reparse) -> ReparseReply:
    if (req.message_id is None) == (not req.all):
        raise InvalidRequest("give message_id, or all: true (not both)",
                             details={"field": "message_id"})
    if req.all:
        def start(tx: SqlStorage) -> None:
            tx.exec("INSERT OR REPLACE INTO meta (k, v) VALUES (?, '0')", _CURSOR)
            ctx.schedule(PURPOSE, tx.now_ms())
        sql.transaction_sync(start)
        return ReparseReply(reparsed=0, scheduled=True)
    message_id = req.message_id or ""
    raw = _source(sql, message_id)
    if raw is None:
        exists = sql.exec("SELECT 1 FROM messages WHERE id = ?", message_id).all()
        known = sql.exec("SELECT 1 FROM inbound_sources WHERE message_id = ?", message_id).all()
        if known and not exists:
            raise MailboxActorsError(ErrorCode.CONFLICT, "the message was deleted: its source "
                                     "went with it", details={"field": "message_id"})
        if exists:
            raise MailboxActorsError(ErrorCode.CONFLICT, "the message was stored before sources "
                                     "were kept: it cannot be parsed again",
                                     details={"field": "message_id"})
        raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no received message with this id",
                                 details={"field": "message_id"})
    parsed = parse_message(raw, lim)
    def commit_one(tx: SqlStorage) -> bool:
        changed = _apply(tx, message_id, parsed, ctx.emit)
        search.merge_some(tx)
        return changed
    changed = sql.transaction_sync(commit_one)
    return ReparseReply(reparsed=1 if changed else 0, scheduled=False, defects=parsed.defects)


def _apply(tx: SqlStorage, message_id: str, p: ParsedMessage, emit: threads.Emit) -> bool:
    """The message's parsed fields replaced by ``p``'s; False when it is gone meanwhile."""
    rows = tx.exec("SELECT thread_id FROM messages WHERE id = ?", message_id).all()
    if not rows:
        return False
    thread_id = rows[0][0]
    search.unindex(tx, message_id)  # while the row still says what was indexed
    detail = StoredDetail(
        to=p.to, cc=p.cc, delivered_to=p.delivered_to, headers=p.headers,
        attachments=[AttachmentView(filename=a.filename, content_type=a.content_type,
                                    size=a.size) for a in p.attachments], defects=p.defects)
    tx.exec("UPDATE messages SET message_id_header = ?, from_addr = ?, subject = ?, date_ms = ?, "
            "detail = ?, text = ?, html = ? WHERE id = ?", p.message_id, p.from_addr, p.subject,
            p.date_ms, DETAIL_ENCODER.encode(detail), p.text, p.html, message_id)
    tx.exec("DELETE FROM attachment_chunks WHERE message_id = ?", message_id)
    for idx, att in enumerate(p.attachments):
        data = att.content or b""
        for chunk, start in enumerate(range(0, len(data), _CHUNK)):
            tx.exec("INSERT INTO attachment_chunks (message_id, idx, chunk, data) "
                    "VALUES (?, ?, ?, ?)", message_id, idx, chunk, data[start:start + _CHUNK])
    # Extracted text of parts that no longer exist goes; the rest stays searchable.
    tx.exec("DELETE FROM attachment_texts WHERE message_id = ? AND part >= ?", message_id,
            len(p.attachments))
    tx.exec("UPDATE inbound_sources SET defects = ? WHERE message_id = ?", _ENC.encode(p.defects),
            message_id)
    keys = threads.as_stamped(tx, thread_keys(f"<{p.message_id}>" if p.message_id else None,
                                              p.in_reply_to, p.references,
                                              p.thread_index_root))
    threads.regroup(tx, keys, thread_id, emit)
    search.index(tx, message_id)
    return True


def erase(tx: SqlStorage) -> None:
    """Inside the erase transaction (IN-6): a reparse of every message that is under way ends
    (its next page finds nothing to do and emits nothing)."""
    tx.exec("DELETE FROM meta WHERE k = ?", _CURSOR)


def run_page(ctx: ActorContext, sql: SqlStorage, lim: InboundLimits) -> None:
    """``alarm:reparse``: the next page of ``all``, its position stored with it; re-armed for
    now until every message was done."""
    rows = sql.exec("SELECT v FROM meta WHERE k = ?", _CURSOR).all()
    if not rows or ctx.erased:
        return
    after = int(rows[0][0])
    page = sql.exec("SELECT m.seq, m.id FROM messages m WHERE m.seq > ? AND (m.raw IS NOT NULL OR "
                    "EXISTS (SELECT 1 FROM raw_chunks s WHERE s.message_id = m.id)) "
                    "ORDER BY m.seq LIMIT ?",
                    after, PAGE).all()
    parsed = []
    for seq, message_id in page:
        raw = _source(sql, message_id)
        if raw is not None:
            parsed.append((seq, message_id, parse_message(raw, lim)))

    def commit(tx: SqlStorage) -> None:
        for _, message_id, p in parsed:
            _apply(tx, message_id, p, ctx.emit)
        search.merge_some(tx)  # once for the page: a bounded merge
        if len(page) < PAGE:
            tx.exec("DELETE FROM meta WHERE k = ?", _CURSOR)
            ctx.emit(tx, "messages.reparsed", {"last_page": len(page)})
        else:
            tx.exec("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", _CURSOR,
                    str(page[-1][0]))
            ctx.schedule(PURPOSE, tx.now_ms() + 1)
    sql.transaction_sync(commit)
