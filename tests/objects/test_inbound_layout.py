"""IdentityMailbox's leaner inbound layout (migration 9): a message's text and html live in its
own row and its sequence has no AUTOINCREMENT. A mailbox made by the previous code keeps every
message (text, html, thread, order), replays and deletion still work, and new messages list
after the old ones (IN-1, IN-3, IN-6, RT-8)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.objects.identity_mailbox.inbound_rows import StoredDetail
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.inbound import DeleteMessage, GetMessage, GetThread, Ingest, ListMessages
from mailbox_actors.wire.mailbox import MailboxInit

NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}
LEAN = next(m.version for m in IdentityMailbox.migrations
            if any("messages_lean" in s for s in m.statements))



class _PreviousMailbox(IdentityMailbox):  # the code as it was before the lean layout
    migrations = IdentityMailbox.migrations[:LEAN - 1]


def _mail(mid: str, *, irt: str | None = None) -> bytes:
    return (f"From: a@example.com\r\nSubject: s {mid}\r\nMessage-ID: <{mid}>\r\n"
            + (f"In-Reply-To: <{irt}>\r\n" if irt else "") + f"\r\nbody of {mid}\r\n").encode()


async def _ingest(rt: TestRuntime, m: str, source: str, raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = await rt.call(NS, m, Ingest(source_id=source, raw=raw), **IDS)
    return out


async def _view(rt: TestRuntime, m: str, message_id: str) -> dict[str, Any] | None:
    got: dict[str, Any] | None = await rt.call(NS, m, GetMessage(message_id=message_id), **IDS)
    return got


def _store_as_before(path: Path) -> None:
    """Three messages as the previous code's ingest wrote them: rows in messages (with their
    sequence from sqlite_sequence), their bodies in message_bodies, threads, keys, sources."""
    detail = msgspec.msgpack.encode(StoredDetail(to=["b@example.com"], cc=[], delivered_to=[],
                                                 headers=[("Subject", "s")], attachments=[],
                                                 defects=[]))
    rows = [("imsg_1", "thr_1", "one@x", "text", "body one", 1000),
            ("imsg_2", "thr_1", "two@x", "text", "body two", 2000),
            ("imsg_3", "thr_3", "alt@x", "html", "<p>three</p>", 3000)]
    conn = sqlite3.connect(path)
    try:
        with conn:
            for mid, thread, header, kind, content, at in rows:
                conn.execute("INSERT INTO messages (id, thread_id, message_id_header, from_addr, "
                             "subject, date_ms, received_at_ms, size_bytes, detail) VALUES "
                             "(?, ?, ?, 'a@example.com', 's', ?, ?, 100, ?)",
                             (mid, thread, header, at, at, detail))
                conn.execute("INSERT INTO message_bodies (message_id, kind, content) "
                             "VALUES (?, 'text', ?)", (mid, f"text of {mid}"))
                if kind == "html":
                    conn.execute("INSERT INTO message_bodies (message_id, kind, content) "
                                 "VALUES (?, 'html', ?)", (mid, content))
                conn.execute("INSERT INTO thread_keys (key, thread_id) VALUES (?, ?)",
                             (header, thread))
                conn.execute("INSERT INTO inbound_sources (source_id, digest, message_id, "
                             "thread_id, defects) VALUES (?, ?, ?, ?, ?)",
                             (f"s-{mid}", hashlib.sha256(b"replayed").hexdigest(), mid, thread,
                              msgspec.msgpack.encode([])))
            conn.execute("INSERT INTO threads (id, size, created_at_ms, last_at_ms) VALUES "
                         "('thr_1', 2, 1000, 2000), ('thr_3', 1, 3000, 3000)")
    finally:
        conn.close()


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    finally:
        conn.close()


@pytest.mark.anyio
async def test_a_mailbox_of_the_previous_layout_keeps_its_messages(tmp_path: Path) -> None:
    """RT-8, IN-1, IN-3, IN-6: messages stored in the previous layout (two in one thread, one
    with text and html) read the same after the migration, bodies included; a replayed source id
    is still a duplicate; a new reply lists first and joins its thread; deleting a message takes
    its bodies with it; no sqlite_sequence row is kept for the messages any more."""
    previous = [_PreviousMailbox if c is IdentityMailbox else c for c in DEFAULT_OBJECTS]
    async with TestRuntime(tmp_path, objects=previous) as rt:
        m = rt.id_from_name(NS, "bob")
        await rt.call(NS, m, MailboxInit(), **IDS)
        path = rt.node.host.path_for(NS, m)
    assert "message_bodies" in _tables(path)  # the previous layout indeed
    _store_as_before(path)

    async with TestRuntime(tmp_path) as rt:
        one, three = await _view(rt, m, "imsg_1"), await _view(rt, m, "imsg_3")
        assert one is not None and three is not None
        assert (one["text"], one["html"], one["thread_id"]) == ("text of imsg_1", None, "thr_1")
        assert (three["text"], three["html"]) == ("text of imsg_3", "<p>three</p>")
        assert one["to"] == ["b@example.com"] and one["message_id_header"] == "one@x"
        listed = await rt.call(NS, m, ListMessages(limit=10), **IDS)
        assert [x["message_id"] for x in listed["messages"]] == ["imsg_3", "imsg_2", "imsg_1"]
        again = await rt.call(NS, m, Ingest(source_id="s-imsg_1", raw=b"replayed"), **IDS)
        assert again["message_id"] == "imsg_1" and again["duplicate"] is True
        reply = await _ingest(rt, m, "s-new", _mail("four@x", irt="two@x"))
        assert reply["thread_id"] == "thr_1"
        listed = await rt.call(NS, m, ListMessages(limit=10), **IDS)
        assert [x["message_id"] for x in listed["messages"]] == [
            reply["message_id"], "imsg_3", "imsg_2", "imsg_1"]
        thread = await rt.call(NS, m, GetThread(thread_id="thr_1"), **IDS)
        assert thread["message_ids"] == ["imsg_1", "imsg_2", reply["message_id"]]
        new = await _view(rt, m, reply["message_id"])
        assert new is not None and new["text"] == "body of four@x\r\n"
        await rt.call(NS, m, DeleteMessage(message_id="imsg_3"), **IDS)
        assert await _view(rt, m, "imsg_3") is None
    tables = _tables(path)
    assert "message_bodies" not in tables and "messages" in tables
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM sqlite_sequence WHERE name = 'messages'"
                            ).fetchone() == (0,)
        assert conn.execute("SELECT id FROM messages WHERE text IS NOT NULL ORDER BY seq"
                            ).fetchall() == [("imsg_1",), ("imsg_2",), (reply["message_id"],)]
    finally:
        conn.close()
