"""One actor's file as operator inspection shows it (UI-1, CA-10): its runtime view, a page of a
table's rows, of its KV, of its outbox, each read through a read-only connection that never
activates the actor nor changes the file. Text and bytes are shown only with ``content``;
otherwise a text that reads as an id, state or code is shown and anything else described by its
size. The caller (``node.inspection``) checks parameters and adds what only the node knows.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import sqlite3
from pathlib import Path
from typing import Any

from mailbox_actors.core.cursors import CursorCodec
from mailbox_actors.platform.storage.kv_codec import decode_value
from mailbox_actors.platform.storage.readonly import read_only, table_exists
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.inspection import (
    ActorDetail,
    AlarmView,
    KvEntry,
    KvPage,
    OutboxEvent,
    OutboxPage,
    PurposeView,
    Redacted,
    RowsPage,
    TableView,
)

__all__ = ["ROW_COUNT_CAP", "as_int", "kv_page", "not_found", "outbox_page", "read_meta", "rows_page",
           "shown_value", "view_actor"]

ROW_COUNT_CAP = 100_000  # a table's rows are counted this far, no further (a bounded read)
# Text shown without content: ids, states, codes, numbers, timestamps. No spaces, no '@'.
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9_.:+=/\-]{0,128}")
# Columns whose text is content by its name, whatever it looks like.
_CONTENT_COLUMNS = re.compile(
    r"(^|_)(body|text|html|subject|raw|headers?|address(es)?|from|to|cc|bcc|reply_to|content|"
    r"snippet|source|name|display|data|payload|mime|attachment)s?($|_)", re.IGNORECASE)
_RUNTIME_META_KEYS = ("schema_version", "owner_tenant", "owner_identity", "erased", "event_seq")


def shown_value(value: Any, content: bool, column: str = "") -> Any:
    """A stored value as inspection shows it (see the module doc)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return base64.b64encode(data).decode() if content else Redacted("blob", len(data))
    if isinstance(value, str):
        if content or (_PLAIN_TEXT.fullmatch(value) and not _CONTENT_COLUMNS.search(column)):
            return value
        return Redacted("text", len(value.encode()))
    return Redacted(type(value).__name__, 0)


def _kv_shown(value: Any, content: bool) -> Any:
    """A decoded KV value as JSON-able data (tuples as lists, datetimes as ISO text)."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_kv_shown(v, content) for v in value]
    if isinstance(value, dict):
        return {str(k): _kv_shown(v, content) for k, v in value.items()}
    return shown_value(value, content)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _position_value(v: Any) -> list[Any]:
    return ["b", base64.b64encode(v).decode()] if isinstance(v, bytes) else ["v", v]


def _value_of(p: Any) -> Any:
    if not (isinstance(p, list) and len(p) == 2 and p[0] in ("b", "v")):
        raise InvalidRequest("cursor position is malformed", details={"field": "cursor"})
    return base64.b64decode(p[1]) if p[0] == "b" else p[1]


def _meta(conn: sqlite3.Connection) -> dict[str, str]:
    """The runtime's meta keys, from ``_ma_meta`` (or schema 1's ``meta``, never migrated here)."""
    if table_exists(conn, "_ma_meta"):
        return dict(conn.execute("SELECT k, v FROM _ma_meta").fetchall())
    if table_exists(conn, "meta"):
        keys = ",".join("?" * len(_RUNTIME_META_KEYS))
        return {str(k): str(v) for k, v in conn.execute(
            f"SELECT k, v FROM meta WHERE (k IN ({keys}) OR k GLOB 'alarm:*') AND v IS NOT NULL",
            _RUNTIME_META_KEYS).fetchall()}
    return {}


def as_int(v: str | None) -> int | None:
    try:
        return None if v is None else int(v)
    except ValueError:
        return None


def _count(conn: sqlite3.Connection, table: str, where: str = "") -> tuple[int, bool]:
    n = conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM {_quote(table)} {where} "
                     f"LIMIT {ROW_COUNT_CAP + 1})").fetchone()[0]
    return min(n, ROW_COUNT_CAP), n > ROW_COUNT_CAP


def _user_tables(conn: sqlite3.Connection) -> list[str]:
    # Not a virtual table: a contentless FTS5 index (the mailbox's message_search) cannot be
    # scanned ("table does not support scanning"); its shadow tables are listed as they are.
    # Not the runtime's own outbox either: it has its own view (``outbox_page``, the counts).
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' "
        "ESCAPE '!' AND name NOT LIKE '!_ma!_%' ESCAPE '!' AND name <> 'outbox' AND "
        "coalesce(sql, '') NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name").fetchall()]


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, int]]:
    """(column, its place in the primary key or 0)."""
    return [(r[1], r[5]) for r in conn.execute(f"PRAGMA table_info({_quote(table)})").fetchall()]


def _has_rowid(conn: sqlite3.Connection, table: str) -> bool:
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (table,)).fetchone()
    return not (sql and sql[0] and re.search(r"WITHOUT\s+ROWID\s*$", sql[0].strip(), re.I))


def read_meta(path: Path) -> dict[str, str]:
    """The runtime's meta keys of the file at ``path`` ({} when there is none)."""
    with read_only(path) as conn:
        return {} if conn is None else _meta(conn)


def view_actor(path: Path, namespace: str, object_id: str, *, node: str, active: bool,
               retries: int, now_ms: int) -> ActorDetail:
    """One actor's runtime view from its file (the node gives what only it knows)."""
    now = now_ms
    with read_only(path) as conn:
        if conn is None:
            raise not_found(namespace)
        size = path.stat().st_size
        meta = _meta(conn)
        at = None
        if table_exists(conn, "_ma_alarm"):
            row = conn.execute("SELECT at_ms FROM _ma_alarm").fetchone()
            at = None if row is None else int(row[0])
        purposes = sorted(
            (PurposeView(purpose=k[6:], due_ms=int(v),
                         retries=retries if int(v) <= now else 0)
             for k, v in meta.items() if k.startswith("alarm:") and as_int(v) is not None),
            key=lambda p: (p.due_ms, p.purpose))
        tables = []
        for t in _user_tables(conn):
            rows, capped = _count(conn, t)
            tables.append(TableView(name=t, rows=rows, rows_capped=capped,
                                    columns=[c for c, _ in _columns(conn, t)]))
        kv = _count(conn, "_ma_kv")[0] if table_exists(conn, "_ma_kv") else 0
        pending = dispatched = 0
        if table_exists(conn, "outbox"):
            pending = _count(conn, "outbox", "WHERE dispatched_at IS NULL")[0]
            dispatched = _count(conn, "outbox", "WHERE dispatched_at IS NOT NULL")[0]
    shown_meta: dict[str, Any] = {k: (as_int(v) if k in ("schema_version", "event_seq") else v)
                                  for k, v in sorted(meta.items())
                                  if not k.startswith("alarm:")}
    return ActorDetail(
        namespace=namespace, id=object_id, node=node, active=active,
        file_bytes=size, meta=shown_meta,
        alarm=AlarmView(at_ms=at, retries=retries if at is not None else 0,
                        purposes=purposes),
        tables=tables, kv_keys=kv, outbox_pending=pending, outbox_dispatched=dispatched)


def rows_page(cursors: CursorCodec, path: Path, namespace: str, table: str, scope: str,
              position: list[Any] | None, n: int, content: bool) -> RowsPage:
    with read_only(path) as conn:
        if conn is None:
            raise not_found(namespace)
        if table not in _user_tables(conn) and not ((table.startswith("_ma_") or table == "outbox")
                                                    and table_exists(conn, table)):
            # Not a virtual table either: an FTS5 index is read through its own shadow tables.
            raise InvalidRequest("no such table in this actor", details={"field": "table",
                                                                        "tables": _user_tables(conn)})
        cols = _columns(conn, table)
        names = [c for c, _ in cols]
        if _has_rowid(conn, table):
            keys = ["rowid"]
            select = f"SELECT rowid, * FROM {_quote(table)}"
            skip = 1
        else:
            keys = [c for c, pk in sorted((c for c in cols if c[1]), key=lambda c: c[1])]
            select = f"SELECT * FROM {_quote(table)}"
            skip = 0
        order = ", ".join(_quote(k) if k != "rowid" else "rowid" for k in keys)
        key_at = [(0 if k == "rowid" else skip + names.index(k)) for k in keys]
        args: list[Any] = []
        where = ""
        if position is not None:
            if len(position) != len(keys):
                raise InvalidRequest("cursor position is malformed", details={"field": "cursor"})
            args = [_value_of(p) for p in position]
            where = f" WHERE ({order}) > ({', '.join('?' * len(keys))})"
        got = conn.execute(f"{select}{where} ORDER BY {order} LIMIT ?",
                           (*args, n + 1)).fetchall()
    page = got[:n]
    nxt = None
    if len(got) > n:
        nxt = cursors.make("rows", scope, [_position_value(page[-1][i]) for i in key_at])
    return RowsPage(table=table, columns=names, next_cursor=nxt, rows=[
        [shown_value(v, content, c) for v, c in zip(r[skip:], names, strict=True)]
        for r in page])


def kv_page(cursors: CursorCodec, path: Path, namespace: str, scope: str, after: str | None,
            n: int, content: bool) -> KvPage:
    with read_only(path) as conn:
        if conn is None:
            raise not_found(namespace)
        if not table_exists(conn, "_ma_kv"):
            return KvPage(entries=[])
        got = conn.execute("SELECT k, v FROM _ma_kv WHERE k > ? ORDER BY k LIMIT ?",
                           (after or "", n + 1)).fetchall()
    entries = []
    for k, v in got[:n]:
        try:
            value = decode_value(bytes(v))
            kind = type(value).__name__
            shown = _kv_shown(value, content)
        except Exception:  # a value this code cannot decode: described, not raised
            kind, shown = "undecodable", Redacted("blob", len(v))
        entries.append(KvEntry(key=str(shown_value(k, content)) if isinstance(
            shown_value(k, content), str) else f"<redacted {len(k.encode())} bytes>",
            value=shown, type=kind))
    nxt = cursors.make("kv", scope, [got[n - 1][0]]) if len(got) > n else None
    return KvPage(entries=entries, next_cursor=nxt)


def outbox_page(cursors: CursorCodec, path: Path, namespace: str, scope: str,
                before: int | None, n: int) -> OutboxPage:
    with read_only(path) as conn:
        if conn is None:
            raise not_found(namespace)
        if not table_exists(conn, "outbox"):
            return OutboxPage(events=[], pending=0)
        pending = _count(conn, "outbox", "WHERE dispatched_at IS NULL")[0]
        got = conn.execute(
            "SELECT sequence, id, type, occurred_at_ms, dispatched_at FROM outbox "
            "WHERE sequence < ? ORDER BY sequence DESC LIMIT ?",
            (2**63 - 1 if before is None else before, n + 1)).fetchall()
    events = [OutboxEvent(sequence=r[0], id=r[1], type=r[2], occurred_at_ms=r[3],
                          dispatched_at_ms=r[4]) for r in got[:n]]
    nxt = cursors.make("outbox", scope, [got[n - 1][0]]) if len(got) > n else None
    return OutboxPage(events=events, pending=pending, next_cursor=nxt)



def not_found(namespace: str) -> MailboxActorsError:
    code = {"identity_mailbox": ErrorCode.IDENTITY_NOT_FOUND,
            "domain_monitor": ErrorCode.DOMAIN_NOT_FOUND,
            "tenant_quota": ErrorCode.TENANT_NOT_FOUND}.get(
                namespace, ErrorCode.TENANT_NOT_FOUND)  # any other: the runtime's Actor default
    return MailboxActorsError(code, "no such actor: its file does not exist",
                              details={"field": "id"})
