"""Full-text search of an IdentityMailbox's received mail (IN-9, IN-10): an SQLite FTS5 index in
the actor's own file, kept in step with the messages in the same transactions.

``message_search`` is a contentless FTS5 table (it stores tokens, not a second copy of the mail)
keyed by the message's ``seq``: its columns are the subject, the body (the text part, else the
html) and the attachments' extracted text (``attachment_texts``, given by ``attachment_text_ready``).
A contentless row is removed by FTS5's ``delete`` command with the values it was indexed with, so
every change goes ``unindex`` (while the stored row still says what was indexed), change, ``index``;
the values come from the stored row by one statement (``_VALUES``), the same at both ends.
``erase`` empties the index with ``delete-all`` and a deleted message's tokens are merged away at
once (``forget``), so neither leaves a trace in it.

``forget`` merges every segment of the index into one, as FTS5's ``optimize`` does (only a merge
into the oldest segment drops the delete markers, which name the message's words and its seq),
but in steps of ``MERGE_PAGES`` pages (``merge`` with a negative count): after each step FTS5
frees the input pages already read, so the merge needs a few dozen free pages where ``optimize``
wrote the whole index anew before freeing the old one, and a mailbox at its size limit can still
delete (``max_database_bytes``'s reserve, ``transaction_freeing``). Its cost still grows with the
index: it rewrites all of it.

Merges are bounded (``MERGE_PAGES``). Each transaction that indexes adds a segment to the index;
FTS5's automatic merging would, now and then, merge a whole level of segments inside one ingest
(100-250 ms with the event loop held, at 10,000 messages). ``FTS_MERGE_SCHEMA`` turns it off
(``automerge`` 0) and every transaction that indexes does a ``merge`` of at most ``MERGE_PAGES``
pages instead (``merge_some``): a level's merge is spread over the ingests that follow, and since
each ingest adds about a page and does up to ``MERGE_PAGES`` of merging, the levels stay short
(below ``crisismerge``, FTS5's own emergency merge).

A query FTS5 cannot parse is ``invalid_request`` with its position, found on a private in-memory
FTS5 table before the actor's file is asked. Nothing here logs a query or a text.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from typing import Any

from mailbox_actors.objects.identity_mailbox import threads
from mailbox_actors.objects.identity_mailbox.inbound_rows import DETAIL_DECODER
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, LimitExceeded, MailboxActorsError
from mailbox_actors.wire.search import (
    AttachmentTextReady,
    AttachmentTextReply,
    SearchHit,
    SearchMessages,
    SearchReply,
)

__all__ = ["FTS_MERGE_SCHEMA", "FTS_USERMERGE", "FTS_USERMERGE_SCHEMA", "INDEX_NEW",
           "MAX_ATTACHMENT_TEXT_BYTES", "MERGE_PAGES",
           "SEARCH_SCHEMA", "SEARCH_TABLES", "attachment_text_ready", "body_of", "check_query",
           "erase", "forget", "index", "merge_some", "search", "unindex"]

# Text of one attachment part kept for search: more is refused (limit_exceeded), never cut.
MAX_ATTACHMENT_TEXT_BYTES = 1 << 20
# Candidates one search call looks at when filters run on the stored detail (to, attachments):
# a page may then be short, with a cursor to go on from.
_SCAN_MAX = 400

SEARCH_SCHEMA = (
    "CREATE TABLE attachment_texts (message_id TEXT NOT NULL, part INTEGER NOT NULL, "
    "text TEXT NOT NULL, PRIMARY KEY (message_id, part)) WITHOUT ROWID",
    # No column sizes: results are ordered newest first, never by rank (one b-tree less a write).
    "CREATE VIRTUAL TABLE message_search USING fts5(subject, body, attachments, content='', "
    "columnsize=0, tokenize='unicode61 remove_diacritics 2')",
    # The messages stored before: indexed as ``_VALUES`` reads them (no attachment text yet).
    "INSERT INTO message_search (rowid, subject, body, attachments) "
    "SELECT seq, subject, coalesce(text, html, ''), '' FROM messages",
)
# A later migration: no automatic merges (``merge_some`` does bounded ones instead). The setting
# is kept in the index's own config table, so it holds for every connection to the file.
FTS_MERGE_SCHEMA = (
    "INSERT INTO message_search (message_search, rank) VALUES ('automerge', 0)",
)
# A later migration: a level is merged once it holds 8 segments, not FTS5's default 4. Each
# ingest adds a segment; with 4 a token was rewritten at every fourth ingest's level, and the
# index's pages were about a third of the pages an ingest writes. With 8 the index has more
# segments (up to 7 a level, 4-5 levels at 10,000 messages: searched in well under a millisecond)
# and an ingest writes about 1.7 WAL pages fewer (19.6 -> 17.9 a one-message ingest).
FTS_USERMERGE = 8
FTS_USERMERGE_SCHEMA = (
    f"INSERT INTO message_search (message_search, rank) VALUES ('usermerge', {FTS_USERMERGE})",
)
# Pages one transaction's merge may write, at most (about 4 KB each): a few times what one
# message adds, so merging keeps up; a bound on the time one ingest spends merging.
MERGE_PAGES = 16
_MERGE = "INSERT INTO message_search (message_search, rank) VALUES ('merge', ?)"
# Erase empties these with the messages (IN-6); the index itself by ``erase``.
SEARCH_TABLES = ("attachment_texts",)

# What a message is indexed with, from its stored row: the same statement at index and unindex.
_VALUES = ("SELECT m.seq, m.subject, coalesce(m.text, m.html, ''), coalesce((SELECT "
           "group_concat(a.text, ' ') FROM (SELECT text FROM attachment_texts WHERE "
           "message_id = m.id ORDER BY part) a), '') FROM messages m WHERE m.{key} = ?")
_INDEX = ("INSERT INTO message_search (rowid, subject, body, attachments) " + _VALUES)
_UNINDEX = ("INSERT INTO message_search (message_search, rowid, subject, body, attachments) "
            + _VALUES.replace("SELECT m.seq,", "SELECT 'delete', m.seq,", 1))
# Right after a message's own INSERT (ingest): its seq is the last rowid inserted.
INDEX_NEW = ("INSERT INTO message_search (rowid, subject, body, attachments) "
             "VALUES (last_insert_rowid(), ?, ?, '')")


def body_of(text: str | None, html: str | None) -> str:
    """The body column a message is indexed with (``coalesce(text, html, '')`` in SQL)."""
    return text if text is not None else html if html is not None else ""


def index(tx: SqlStorage, message_id: str) -> None:
    """The message indexed again; the caller's transaction then calls ``merge_some`` once."""
    tx.exec(_INDEX.format(key="id"), message_id)


def merge_some(tx: SqlStorage) -> None:
    """Inside a transaction that indexed: at most ``MERGE_PAGES`` pages of the index's merging
    (none when no level is due: then it reads one row)."""
    tx.exec(_MERGE, MERGE_PAGES)


def unindex(tx: SqlStorage, message_id: str) -> None:
    """Before the message's row (or its attachment text) changes or goes."""
    tx.exec(_UNINDEX.format(key="id"), message_id)


def forget(tx: SqlStorage) -> None:
    """After a message was unindexed and its rows deleted (their pages feed the merge): every
    segment merged into one in bounded steps, so neither its tokens nor the delete markers naming
    them are left. A step that found nothing to merge writes fewer than 2 rows (FTS5's own test
    for a merge that did no work)."""
    while tx.exec(_MERGE, -MERGE_PAGES).rows_written >= 2:
        pass


def erase(tx: SqlStorage) -> None:
    """Inside the erase transaction: the whole index and every attachment text (IN-6)."""
    tx.exec("INSERT INTO message_search (message_search) VALUES ('delete-all')")
    for table in SEARCH_TABLES:
        tx.exec(f"DELETE FROM {table}")


# ---- queries ---------------------------------------------------------------------------------

_probe_lock = threading.Lock()
_probe: sqlite3.Connection | None = None
_NEAR = re.compile(r'near "(.*)"', re.S)
_NAMED = re.compile(r"no such column: (\S+)")


def check_query(query: str) -> None:
    """``invalid_request`` naming the position (0-based, in characters) of the first thing FTS5
    cannot parse in ``query``; the query itself is never echoed."""
    global _probe
    with _probe_lock:
        if _probe is None:
            _probe = sqlite3.connect(":memory:", check_same_thread=False)
            _probe.execute("CREATE VIRTUAL TABLE q USING fts5(subject, body, attachments, "
                           "content='', columnsize=0)")
        try:
            _probe.execute("SELECT rowid FROM q WHERE q MATCH ?", (query,)).fetchall()
            return
        except sqlite3.Error as e:
            reason = str(e)
    near = _NEAR.search(reason) or _NAMED.search(reason)
    found = query.find(near.group(1)) if near is not None and near.group(1) else -1
    position = found if found >= 0 else len(query)
    kind = "an unknown column" if "no such column" in reason else "a syntax error"
    raise MailboxActorsError(
        ErrorCode.INVALID_REQUEST, f"the search query has {kind} at position {position}",
        details={"field": "query", "position": position},
        fix='Quote words FTS5 treats as operators ("NOT", "-", ":") or remove them; the '
            "columns are subject, body and attachments.")


def search(sql: SqlStorage, req: SearchMessages) -> SearchReply:
    check_query(req.query)
    f = req.filters
    before = _cursor(req.cursor)
    where = ["message_search MATCH ?", "s.rowid < ?"]
    params: list[Any] = [req.query, before]
    if f is not None:
        if f.from_ is not None:
            where.append("m.from_addr = ? COLLATE NOCASE")
            params.append(f.from_.strip())
        if f.thread_id is not None:
            survivor = threads.resolve(sql, f.thread_id) or f.thread_id
            where.append(f"m.thread_id IN ({threads.MEMBERS})")
            params += [survivor, survivor]
        if f.received_after_ms is not None:
            where.append("m.received_at_ms >= ?")
            params.append(f.received_after_ms)
        if f.received_before_ms is not None:
            where.append("m.received_at_ms < ?")
            params.append(f.received_before_ms)
    by_detail = f is not None and (f.to is not None or f.has_attachment is not None)
    fetch = min(_SCAN_MAX, max(req.limit + 1, 4 * req.limit)) if by_detail else req.limit + 1
    text = ("SELECT m.seq, m.id, COALESCE(t.merged_into, m.thread_id), m.from_addr, m.subject, "
            "m.received_at_ms, m.size_bytes, m.detail FROM message_search s "
            "JOIN messages m ON m.seq = s.rowid LEFT JOIN threads t ON t.id = m.thread_id "
            f"WHERE {' AND '.join(where)} ORDER BY s.rowid DESC LIMIT ?")
    hits: list[SearchHit] = []
    hits_last = 0
    scanned = 0
    last_seq: int | None = None
    while True:
        rows = sql.exec(text, *params[:1], before, *params[2:], fetch).all()
        for r in rows:
            scanned += 1
            last_seq = r[0]
            detail = DETAIL_DECODER.decode(r[7])
            if f is not None and not _detail_matches(f.to, f.has_attachment, detail):
                continue
            if len(hits) == req.limit:  # one more than the page: there is a next one
                return SearchReply(messages=hits, next_cursor=str(hits_last))
            hits.append(SearchHit(message_id=r[1], thread_id=r[2], from_=r[3], subject=r[4],
                                  received_at_ms=r[5], size_bytes=r[6],
                                  has_attachment=bool(detail.attachments)))
            hits_last = r[0]
        if len(rows) < fetch:  # the index has no more
            return SearchReply(messages=hits, next_cursor=None)
        if scanned >= _SCAN_MAX:  # bounded: the caller goes on from the last one looked at
            return SearchReply(messages=hits, next_cursor=str(last_seq))
        before = last_seq if last_seq is not None else before


def _detail_matches(to: str | None, has_attachment: bool | None, detail: Any) -> bool:
    if has_attachment is not None and bool(detail.attachments) != has_attachment:
        return False
    if to is not None:
        wanted = to.strip().lower()
        return any(a.lower() == wanted for a in (*detail.to, *detail.cc, *detail.delivered_to))
    return True


def _cursor(cursor: str | None) -> int:
    if cursor is None:
        return 1 << 62
    if not cursor.isdigit():
        raise InvalidRequest("cursor is not one this op returned", details={"field": "cursor"})
    return int(cursor)


# ---- attachment text (IN-9) ------------------------------------------------------------------

def attachment_text_ready(tx: SqlStorage, req: AttachmentTextReady) -> AttachmentTextReply:
    """Inside the caller's transaction: the part's text stored and the message indexed again."""
    size = len(req.text.encode())
    if size > MAX_ATTACHMENT_TEXT_BYTES:
        raise LimitExceeded("max_attachment_text_bytes", MAX_ATTACHMENT_TEXT_BYTES,
                            f"the attachment text is {size} bytes; the cap is "
                            f"{MAX_ATTACHMENT_TEXT_BYTES}")
    rows = tx.exec("SELECT detail FROM messages WHERE id = ?", req.message_id).all()
    if not rows:
        raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no received message with this id",
                                 details={"field": "message_id"})
    parts = len(DETAIL_DECODER.decode(rows[0][0]).attachments)
    if req.part >= parts:
        raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, f"the message has {parts} attachments",
                                 details={"field": "part", "attachments": parts})
    stored = tx.exec("SELECT text FROM attachment_texts WHERE message_id = ? AND part = ?",
                     req.message_id, req.part).all()
    if stored and stored[0][0] == req.text:
        return AttachmentTextReply(message_id=req.message_id, part=req.part, stored=False)
    if stored and not req.replace:
        raise MailboxActorsError(ErrorCode.CONFLICT, "this part has another text already",
                                 details={"field": "text"},
                                 fix="Send replace: true to put the new text in its place.")
    unindex(tx, req.message_id)
    tx.exec("INSERT OR REPLACE INTO attachment_texts (message_id, part, text) VALUES (?, ?, ?)",
            req.message_id, req.part, req.text)
    index(tx, req.message_id)
    merge_some(tx)
    return AttachmentTextReply(message_id=req.message_id, part=req.part, stored=True)
