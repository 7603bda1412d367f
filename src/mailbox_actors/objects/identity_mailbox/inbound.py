"""IdentityMailbox's received mail (IN-1, IN-2, IN-3, IN-6): ingest, threads, reading, deletion.

``ingest`` refuses a message over the cap, answers a replayed source id from its record (other
bytes: ``conflict``), parses outside the transaction (in a worker thread when large), then stores
the message, its thread, its matched waits and its ``message.received`` event (ids and sizes only)
in one transaction. The schema is ``INBOUND_SCHEMA`` then ``INBOUND_LEAN``; the wait half lives
in ``waits``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, assert_never

import anyio.to_thread
import msgspec

from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.core.inbound.parse import ParsedMessage, parse_message
from mailbox_actors.core.inbound.threads import thread_keys
from mailbox_actors.core.inbound.waits import WaitSubject
from mailbox_actors.objects.identity_mailbox import search, sources, threads, waits
from mailbox_actors.objects.identity_mailbox.inbound_rows import DETAIL_DECODER, StoredDetail
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, LimitExceeded, MailboxActorsError
from mailbox_actors.wire.inbound import (
    AttachmentView,
    DeleteMessage,
    DeleteMessageReply,
    GetMessage,
    GetThread,
    InboundRequest,
    Ingest,
    IngestReply,
    ListMessages,
    MessageList,
    MessageSummary,
    MessageView,
    RegisterWait,
    ThreadView,
    WaitPoll,
)

if TYPE_CHECKING:
    from mailbox_actors.objects.identity_mailbox.inbox import Inbox

__all__ = ["INBOUND_LEAN", "INBOUND_SCHEMA", "INBOUND_TABLES", "THREAD_PARSE", "check_size",
           "counts", "delete_message", "erase", "get_message", "get_thread", "handle", "ingest",
           "limits", "list_messages", "store"]

INBOUND_SCHEMA = (
    # Migration 1's messages table was a placeholder nothing ever wrote.
    "DROP TABLE messages",
    "CREATE TABLE messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, "
    "thread_id TEXT NOT NULL, message_id_header TEXT, from_addr TEXT NOT NULL, "
    "subject TEXT NOT NULL, date_ms INTEGER, received_at_ms INTEGER NOT NULL, "
    "size_bytes INTEGER NOT NULL, detail BLOB NOT NULL)",
    "CREATE INDEX messages_by_thread ON messages (thread_id, seq)",
    "CREATE TABLE message_bodies (message_id TEXT NOT NULL, kind TEXT NOT NULL, "
    "content TEXT NOT NULL, PRIMARY KEY (message_id, kind)) WITHOUT ROWID",
    "CREATE TABLE attachment_chunks (message_id TEXT NOT NULL, idx INTEGER NOT NULL, "
    "chunk INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (message_id, idx, chunk)) "
    "WITHOUT ROWID",
    "CREATE TABLE threads (id TEXT PRIMARY KEY, size INTEGER NOT NULL, "
    "created_at_ms INTEGER NOT NULL, last_at_ms INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE thread_keys (key TEXT PRIMARY KEY, thread_id TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE inbound_sources (source_id TEXT PRIMARY KEY, digest TEXT NOT NULL, "
    "message_id TEXT NOT NULL, thread_id TEXT NOT NULL, defects BLOB NOT NULL) WITHOUT ROWID",
    *waits.WAITS_SCHEMA,
)
# A later migration: the text and html bodies move into the message's row (one b-tree written
# per message, not two) and the sequence loses AUTOINCREMENT (whose sqlite_sequence row was one
# more page of every commit). A sequence is still never reused below a kept message: SQLite
# gives max + 1, so listing order and cursors hold.
INBOUND_LEAN = (
    "CREATE TABLE messages_lean (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
    "thread_id TEXT NOT NULL, message_id_header TEXT, from_addr TEXT NOT NULL, "
    "subject TEXT NOT NULL, date_ms INTEGER, received_at_ms INTEGER NOT NULL, "
    "size_bytes INTEGER NOT NULL, detail BLOB NOT NULL, text TEXT, html TEXT)",
    "INSERT INTO messages_lean (seq, id, thread_id, message_id_header, from_addr, subject, "
    "date_ms, received_at_ms, size_bytes, detail, text, html) SELECT m.seq, m.id, m.thread_id, "
    "m.message_id_header, m.from_addr, m.subject, m.date_ms, m.received_at_ms, m.size_bytes, "
    "m.detail, (SELECT b.content FROM message_bodies b WHERE b.message_id = m.id AND "
    "b.kind = 'text'), (SELECT b.content FROM message_bodies b WHERE b.message_id = m.id AND "
    "b.kind = 'html') FROM messages m",
    "DROP TABLE messages",
    "DROP TABLE message_bodies",
    "ALTER TABLE messages_lean RENAME TO messages",
    "CREATE INDEX messages_by_thread ON messages (thread_id, seq)",
)
# Every table holding received content or what points at it: erase empties them all (IN-6).
INBOUND_TABLES = ("messages", "attachment_chunks", "raw_chunks", "threads", "thread_keys",
                  "inbound_sources", *waits.WAITS_TABLES)

_INSERT_MESSAGE = ("INSERT INTO messages (id, thread_id, message_id_header, from_addr, subject, "
                   "date_ms, received_at_ms, size_bytes, detail, text, html) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_INSERT_MESSAGE_RAW = _INSERT_MESSAGE.replace("html)", "html, raw)").replace("?)", "?, ?)")
_CHUNK = 1 << 20  # attachment content per row, under the 2 MB value limit (RT-7)
THREAD_PARSE = 256 * 1024  # parse larger messages in a worker thread: the loop serves others
_ENC = msgspec.msgpack.Encoder()
_DEFECTS = msgspec.msgpack.Decoder(list[str])


async def handle(mb: Inbox, req: InboundRequest) -> Any:
    """Each inbound op (``INBOUND_OPS``) to its function."""
    match req:
        case Ingest():
            return await ingest(mb, req)
        case RegisterWait():
            return waits.register(mb, req)
        case WaitPoll():
            return waits.poll(mb, req)
        case GetMessage():
            return get_message(mb, req)
        case GetThread():
            return get_thread(mb, req)
        case ListMessages():
            return list_messages(mb, req)
        case DeleteMessage():
            return delete_message(mb, req)
        case _:
            assert_never(req)


def limits(mb: Inbox) -> InboundLimits:
    return mb.ctx.settings.inbound


def check_size(lim: InboundLimits, raw: bytes) -> None:
    """``limit_exceeded`` for a message over ``max_message_bytes`` (nothing is stored)."""
    if len(raw) > lim.max_message_bytes:
        raise LimitExceeded("max_message_bytes", lim.max_message_bytes,
                            f"the message is {len(raw)} bytes; the cap is "
                            f"{lim.max_message_bytes}")


async def ingest(mb: Inbox, req: Ingest) -> IngestReply:
    lim = limits(mb)
    check_size(lim, req.raw)
    digest = hashlib.sha256(req.raw).hexdigest()
    if len(req.raw) > THREAD_PARSE:
        # A replay of a large message is answered before its parse, which is not cheap; the
        # transaction looks again (the actor served other requests while the thread parsed).
        prior = _replay(mb.sql, req.source_id, digest)
        if prior is not None:
            return prior
        parsed = await anyio.to_thread.run_sync(parse_message, req.raw, lim)
    else:
        # A small message is parsed first and its source id claimed inside the transaction,
        # under the write's own lock (a replay is rare; its parse is cheap).
        parsed = parse_message(req.raw, lim)
    return mb.sql.transaction_sync(
        lambda tx: store(mb, tx, req.source_id, digest, len(req.raw), parsed, req.raw))


def _replay(sql: SqlStorage, source_id: str, digest: str) -> IngestReply | None:
    row = sql.exec("SELECT digest, message_id, thread_id, defects FROM inbound_sources "
                   "WHERE source_id = ?", source_id).all()
    if not row:
        return None
    if row[0][0] != digest:
        raise MailboxActorsError(ErrorCode.CONFLICT, "this source_id was ingested with other bytes",
                                 details={"source_id": source_id[:256]},
                                 fix="Use a new source_id for a different message.")
    return IngestReply(message_id=row[0][1],
                       thread_id=threads.resolve(sql, row[0][2]) or row[0][2], duplicate=True,
                       defects=_DEFECTS.decode(row[0][3]))


def store(mb: Inbox, tx: SqlStorage, source_id: str, digest: str, size: int,
          p: ParsedMessage, raw: bytes | None = None) -> IngestReply:
    """Inside the caller's transaction: the parsed message stored (or its replay answered).
    A ``conflict`` is raised before anything of this message is written."""
    now = tx.now_ms()
    message_id = mb.ctx.new_id("imsg")
    keys = thread_keys(f"<{p.message_id}>" if p.message_id else None, p.in_reply_to,
                       p.references, p.thread_index_root)
    keys = threads.as_stamped(tx, keys)
    decision = threads.decide(tx, keys, mb.ctx.new_id("thr"))
    thread_id = decision.thread_id
    # The source id is claimed before anything is written: one statement, where a look-up and
    # then an insert were two. Ignored means stored before (or by another ingest meanwhile):
    # nothing of this transaction is written, and the record answers (a replay, or a conflict).
    if not tx.exec("INSERT OR IGNORE INTO inbound_sources (source_id, digest, message_id, "
                   "thread_id, defects) VALUES (?, ?, ?, ?, ?)", source_id, digest, message_id,
                   thread_id, _ENC.encode(p.defects)).rows_written:
        prior = _replay(tx, source_id, digest)
        assert prior is not None, "an ignored insert leaves the source's row"
        return prior
    threads.apply(tx, decision, now, mb.ctx.emit)
    detail = StoredDetail(
        to=p.to, cc=p.cc, delivered_to=p.delivered_to, headers=p.headers,
        attachments=[AttachmentView(filename=a.filename, content_type=a.content_type,
                                    size=a.size) for a in p.attachments], defects=p.defects)
    small = sources.inline(raw)  # UI-2: the source as received, in the row when small
    row = (message_id, thread_id, p.message_id, p.from_addr, p.subject, p.date_ms, now, size,
           _ENC.encode(detail), p.text, p.html)
    if small is None:
        tx.exec(_INSERT_MESSAGE, *row)
    else:
        tx.exec(_INSERT_MESSAGE_RAW, *row, small)
    tx.exec(search.INDEX_NEW, p.subject, search.body_of(p.text, p.html))  # IN-10, same commit
    search.merge_some(tx)  # bounded: automatic merges are off
    if raw is not None and small is None:
        sources.keep_raw(tx, message_id, raw)  # a large source: in raw_chunks, 1 MB a row
    for idx, att in enumerate(p.attachments):
        data = att.content or b""
        for chunk, start in enumerate(range(0, len(data), _CHUNK)):
            tx.exec("INSERT INTO attachment_chunks (message_id, idx, chunk, data) "
                    "VALUES (?, ?, ?, ?)", message_id, idx, chunk, data[start:start + _CHUNK])
    waits.match_new(mb, tx, lambda: WaitSubject(
        from_addr=p.from_addr, recipients=[*p.to, *p.cc, *p.delivered_to], subject=p.subject,
        headers=p.headers, received_at_ms=now), message_id, thread_id, now)
    mb.ctx.emit(tx, "message.received", {
        "message_id": message_id, "thread_id": thread_id, "size_bytes": size,
        "attachment_count": len(p.attachments), "defect_count": len(p.defects)})
    return IngestReply(message_id=message_id, thread_id=thread_id, duplicate=False,
                       defects=p.defects)


def get_message(mb: Inbox, req: GetMessage) -> MessageView | None:
    rows = mb.sql.exec("SELECT m.id, COALESCE(t.merged_into, m.thread_id), m.message_id_header, "
                       "m.from_addr, m.subject, m.date_ms, m.received_at_ms, m.detail, m.text, "
                       "m.html FROM messages m LEFT JOIN threads t ON t.id = m.thread_id "
                       "WHERE m.id = ?", req.message_id).all()
    if not rows:
        return None
    r = rows[0]
    d = DETAIL_DECODER.decode(r[7])
    return MessageView(message_id=r[0], thread_id=r[1], message_id_header=r[2], from_=r[3],
                       to=d.to, cc=d.cc, subject=r[4], date_ms=r[5], received_at_ms=r[6],
                       text=r[8], html=r[9], headers=d.headers,
                       attachments=d.attachments, defects=d.defects)


def get_thread(mb: Inbox, req: GetThread) -> ThreadView | None:
    """One thread by any of its ids (IN-11: a merged thread's id answers its survivor)."""
    survivor = threads.resolve(mb.sql, req.thread_id)
    if survivor is None:
        return None
    # Thread order: by the sender's Date (a parent that arrived late still comes first), then
    # arrival for messages without one.
    ids = [r[0] for r in mb.sql.exec(
        f"SELECT id FROM messages WHERE thread_id IN ({threads.MEMBERS}) "
        "ORDER BY COALESCE(date_ms, received_at_ms), seq", survivor, survivor)]
    return ThreadView(thread_id=survivor, message_ids=ids)


def list_messages(mb: Inbox, req: ListMessages) -> MessageList:
    before = _cursor(req.cursor)
    where = "m.seq < ?"
    params: list[Any] = [before]
    if req.thread_id is not None:
        # Any of a merged thread's ids lists all of it (IN-11).
        survivor = threads.resolve(mb.sql, req.thread_id) or req.thread_id
        where += f" AND m.thread_id IN ({threads.MEMBERS})"
        params += [survivor, survivor]
    rows = mb.sql.exec(f"SELECT m.seq, m.id, COALESCE(t.merged_into, m.thread_id), m.from_addr, "
                       f"m.subject, m.received_at_ms, m.size_bytes FROM messages m "
                       f"LEFT JOIN threads t ON t.id = m.thread_id WHERE {where} "
                       f"ORDER BY m.seq DESC LIMIT ?", *params, req.limit + 1).all()
    page = rows[:req.limit]
    return MessageList(
        messages=[MessageSummary(message_id=r[1], thread_id=r[2], from_=r[3], subject=r[4],
                                 received_at_ms=r[5], size_bytes=r[6]) for r in page],
        next_cursor=str(page[-1][0]) if len(rows) > req.limit else None)


def _cursor(cursor: str | None) -> int:
    if cursor is None:
        return 1 << 62
    if not cursor.isdigit():
        raise InvalidRequest("cursor is not one this op returned", details={"field": "cursor"})
    return int(cursor)


def delete_message(mb: Inbox, req: DeleteMessage) -> DeleteMessageReply:
    def run(tx: SqlStorage) -> DeleteMessageReply:
        rows = tx.exec("SELECT thread_id FROM messages WHERE id = ?", req.message_id).all()
        if not rows:
            return DeleteMessageReply(deleted=False)
        search.unindex(tx, req.message_id)  # while the row still says what was indexed
        tx.exec("DELETE FROM attachment_chunks WHERE message_id = ?", req.message_id)
        tx.exec("DELETE FROM raw_chunks WHERE message_id = ?", req.message_id)
        tx.exec("DELETE FROM attachment_texts WHERE message_id = ?", req.message_id)
        tx.exec("DELETE FROM messages WHERE id = ?", req.message_id)
        search.forget(tx)  # its tokens merged away: nothing of it left in the index
        # The thread keeps its id and keys (ids never change); it holds one message fewer.
        survivor = threads.resolve(tx, rows[0][0]) or rows[0][0]
        tx.exec("UPDATE threads SET size = size - 1 WHERE id = ?", survivor)
        mb.ctx.emit(tx, "message.deleted", {"message_id": req.message_id,
                                            "thread_id": survivor})
        return DeleteMessageReply(deleted=True)

    # It removes content: it may use the pages kept for that, so a full mailbox makes room.
    return mb.sql.transaction_freeing(run)


def erase(tx: SqlStorage) -> None:
    """Inside the erase transaction (IN-6): every received byte and what points at it."""
    for table in INBOUND_TABLES:
        tx.exec(f"DELETE FROM {table}")
    search.erase(tx)


def counts(sql: SqlStorage) -> dict[str, int]:
    messages = sql.exec("SELECT COUNT(*) FROM messages").one()[0]
    live = sql.exec("SELECT COUNT(*) FROM threads WHERE size > 0 AND merged_into IS NULL"
                    ).one()[0]
    return {"messages": int(messages), "threads": int(live)}
