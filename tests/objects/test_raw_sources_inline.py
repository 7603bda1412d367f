"""IdentityMailbox's raw sources in a rowid table (migration ``RAW_INLINE``): a source of a few KB
lies inline in its page instead of spilling into an overflow page of its own. A mailbox made by
the previous code keeps every source byte for byte (a multi-chunk one too, its chunks in order),
deleting a message still takes its source, and new sources are kept (UI-2, IN-6, RT-8)."""

from __future__ import annotations

import base64
import sqlite3
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.objects.identity_mailbox.sources import RAW_INLINE
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.inbound import DeleteMessage, Ingest
from mailbox_actors.wire.mailbox import MailboxInit
from mailbox_actors.wire.sources import GetRawMessage

NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}
INLINE = next(m.version for m in IdentityMailbox.migrations if m.statements == RAW_INLINE)


class _PreviousMailbox(IdentityMailbox):  # the code as it was before the rowid table
    migrations = IdentityMailbox.migrations[:INLINE - 1]


def _mail(n: int, attachment: bytes = b"") -> bytes:
    msg = EmailMessage()
    msg["From"] = "Alice <alice@example.com>"
    msg["To"] = "bob@example.com"
    msg["Subject"] = f"message {n}"
    msg["Message-ID"] = f"<m-{n}@example.com>"
    msg.set_content("a line of text\n" * 80)
    if attachment:
        msg.add_attachment(attachment, maintype="application", subtype="octet-stream",
                           filename="a.bin")
    return msg.as_bytes()


async def _raw(rt: TestRuntime, m: str, mid: str) -> bytes:
    data, chunk, chunks = b"", 0, 1
    while chunk < chunks:
        got: dict[str, Any] = await rt.call(NS, m, GetRawMessage(message_id=mid, chunk=chunk),
                                            **IDS)
        data += base64.b64decode(got["data"])
        chunk, chunks = chunk + 1, got["chunks"]
    return data


def _table_sql(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'raw_chunks'").fetchone()
        return str(row[0])
    finally:
        conn.close()


@pytest.mark.anyio
async def test_the_previous_layouts_raw_sources_read_back_after_the_migration(
        tmp_path: Path) -> None:
    """RT-8, UI-2, IN-6: sources kept by the previous code (a 1.2 KB one and a 2.5 MB one in
    three chunks) read back byte for byte from the rowid table; a new source is kept; deleting a
    message removes its source's rows."""
    previous = [_PreviousMailbox if c is IdentityMailbox else c for c in DEFAULT_OBJECTS]
    small, large = _mail(1), _mail(2, bytes(range(256)) * 7_000)
    async with TestRuntime(tmp_path, objects=previous) as rt:
        m = rt.id_from_name(NS, "bob")
        await rt.call(NS, m, MailboxInit(), **IDS)
        one = (await rt.call(NS, m, Ingest(source_id="s1", raw=small), **IDS))["message_id"]
        two = (await rt.call(NS, m, Ingest(source_id="s2", raw=large), **IDS))["message_id"]
        path = rt.node.host.path_for(NS, m)
    assert "WITHOUT ROWID" in _table_sql(path)  # the previous layout indeed

    async with TestRuntime(tmp_path) as rt:
        assert await _raw(rt, m, one) == small
        assert await _raw(rt, m, two) == large
        three = (await rt.call(NS, m, Ingest(source_id="s3", raw=_mail(3)), **IDS))["message_id"]
        assert await _raw(rt, m, three) == _mail(3)
        await rt.call(NS, m, DeleteMessage(message_id=two), **IDS)
        assert await rt.call(NS, m, GetRawMessage(message_id=two), **IDS) is None
        left = await rt.run_in_actor(NS, m, lambda a, _s: a.sql.exec(
            "SELECT message_id, count(*) FROM raw_chunks GROUP BY message_id "
            "ORDER BY message_id").all())
        assert sorted(tuple(r) for r in left) == sorted([(one, 1), (three, 1)])
    assert "WITHOUT ROWID" not in _table_sql(path)
