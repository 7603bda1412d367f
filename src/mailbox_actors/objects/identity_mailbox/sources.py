"""Raw sources and attachment content of received mail (UI-2): the bytes as received, kept with
the message in the same transaction, and both read back a chunk (1 MB) at a time.

A source of up to ``RAW_INLINE_MAX`` bytes (nearly all mail) is kept in its message's own row
(``messages.raw``, migration ``RAW_INLINE``); a larger one, and every source stored before that
migration, in ``raw_chunks`` (as attachments live in ``attachment_chunks``), 1 MB a row.
``raw_chunks`` is WITHOUT ROWID: its rows keep only about 1 KB in their b-tree page, so a 1-4 KB
source spilled its rest into an overflow page of its own, and appending to an index-shaped
b-tree rebalances three sibling pages at each split: about 3 WAL frames a message through the
SMTP door, the largest share of an ingest's commit. In the message's row it costs the page the
row is written to anyway. The migration only adds the column (no row is copied), so it runs on a
mailbox at its ``max_database_bytes`` as on any other.
Deleting the message or erasing the mailbox removes the source with the rest (IN-6). Messages received
before this table existed answer ``kept: false``. The same reads serve the owner's ops (the actor's
storage) and an operator in dev mode (a read-only connection to the file, ``node.inspection_http``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from mailbox_actors.objects.identity_mailbox.inbound_rows import DETAIL_DECODER
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import InvalidRequest
from mailbox_actors.wire.sources import AttachmentContent, GetAttachment, GetRawMessage, RawSource

__all__ = ["CHUNK", "RAW_INLINE", "RAW_INLINE_MAX", "RAW_SCHEMA", "Query", "actor_rows",
           "file_rows", "get_attachment", "get_raw_message", "has_inline", "inline", "keep_raw",
           "raw_of"]

# A statement and its arguments -> its rows: the actor's storage or a read-only file connection.
Query = Callable[..., list[Any]]
CHUNK = 1 << 20  # bytes a row and an answer hold, under the 2 MB value limit (RT-7)
RAW_SCHEMA = (
    "CREATE TABLE raw_chunks (message_id TEXT NOT NULL, chunk INTEGER NOT NULL, "
    "data BLOB NOT NULL, PRIMARY KEY (message_id, chunk)) WITHOUT ROWID",
)
# A later migration: small sources in their message's row (the column is added, nothing copied).
RAW_INLINE = ("ALTER TABLE messages ADD COLUMN raw BLOB",)
RAW_INLINE_MAX = 64 * 1024  # larger sources stay in raw_chunks: the row stays a few pages at most
_RAW_INLINE_COLUMN = "SELECT 1 FROM pragma_table_info('messages') WHERE name = 'raw'"


def inline(raw: bytes | None) -> bytes | None:
    """What ``messages.raw`` holds for a source: the bytes when small, else None."""
    return raw if raw is not None and len(raw) <= RAW_INLINE_MAX else None


def keep_raw(tx: SqlStorage, message_id: str, raw: bytes) -> None:
    """Inside the store's transaction: the bytes of a source ``inline`` does not hold."""
    for chunk, start in enumerate(range(0, len(raw), CHUNK)):
        tx.exec("INSERT INTO raw_chunks (message_id, chunk, data) VALUES (?, ?, ?)",
                message_id, chunk, raw[start:start + CHUNK])


def _chunks(size: int) -> int:
    return max(1, -(-size // CHUNK))


def _check_chunk(chunk: int, chunks: int) -> None:
    if chunk >= chunks:
        raise InvalidRequest(f"chunk must be below {chunks}", details={"field": "chunk",
                                                                        "chunks": chunks})


def actor_rows(sql: SqlStorage) -> Query:
    """The actor's own storage as a ``Query`` (the ops)."""
    return lambda statement, *args: sql.exec(statement, *args).all()


def file_rows(conn: sqlite3.Connection) -> Query:
    """A read-only connection to the mailbox's file as a ``Query`` (operator inspection)."""
    return lambda statement, *args: conn.execute(statement, args).fetchall()


def has_inline(rows: Query) -> bool:
    """Whether the file has ``messages.raw`` (a file an operator reads may predate it)."""
    return bool(rows(_RAW_INLINE_COLUMN))


def raw_of(rows: Query, message_id: str) -> bytes | None:
    """The whole source as received (None: not kept), wherever it is kept."""
    found = rows("SELECT raw FROM messages WHERE id = ?", message_id)
    if found and found[0][0] is not None:
        return bytes(found[0][0])
    chunks = rows("SELECT data FROM raw_chunks WHERE message_id = ? ORDER BY chunk", message_id)
    return b"".join(bytes(r[0]) for r in chunks) if chunks else None


def get_raw_message(rows: Query, req: GetRawMessage, *, inline_column: bool = True
                    ) -> RawSource | None:
    """``inline_column``: the file has ``messages.raw`` (the actor's own file always has)."""
    found = rows(f"SELECT size_bytes, {'raw' if inline_column else 'NULL'} FROM messages "
                 "WHERE id = ?", req.message_id)
    if not found:
        return None
    size = int(found[0][0])
    if found[0][1] is not None:
        _check_chunk(req.chunk, 1)
        return RawSource(message_id=req.message_id, kept=True, size_bytes=size, chunk=0,
                         chunks=1, data=bytes(found[0][1]))
    data = rows("SELECT data FROM raw_chunks WHERE message_id = ? AND chunk = ?",
                req.message_id, req.chunk)
    if not data:
        if req.chunk == 0 and not rows("SELECT 1 FROM raw_chunks WHERE message_id = ? LIMIT 1",
                                       req.message_id):
            return RawSource(message_id=req.message_id, kept=False, size_bytes=size, chunk=0,
                             chunks=0, data=b"")
        _check_chunk(req.chunk, _chunks(size))
    return RawSource(message_id=req.message_id, kept=True, size_bytes=size, chunk=req.chunk,
                     chunks=_chunks(size), data=bytes(data[0][0]) if data else b"")


def get_attachment(rows: Query, req: GetAttachment) -> AttachmentContent | None:
    found = rows("SELECT detail FROM messages WHERE id = ?", req.message_id)
    if not found:
        return None
    parts = DETAIL_DECODER.decode(found[0][0]).attachments
    if req.part >= len(parts):
        raise InvalidRequest(f"the message has {len(parts)} attachments",
                             details={"field": "part", "attachments": len(parts)})
    meta = parts[req.part]
    size = meta.size
    chunks = _chunks(size)
    _check_chunk(req.chunk, chunks)
    data = rows("SELECT data FROM attachment_chunks WHERE message_id = ? AND idx = ? AND "
                "chunk = ?", req.message_id, req.part, req.chunk)
    return AttachmentContent(
        message_id=req.message_id, part=req.part, filename=meta.filename,
        content_type=meta.content_type, size_bytes=size, chunk=req.chunk, chunks=chunks,
        data=bytes(data[0][0]) if data else b"")
