"""A received message's raw source and an attachment's content (UI-2), as the owner reads them:
byte for byte, a chunk (1 MB) at a time, gone with the message and with an erase."""

from __future__ import annotations

import base64
from email.message import EmailMessage
from typing import Any

import pytest

from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.inbound import DeleteMessage, Ingest
from mailbox_actors.wire.mailbox import MailboxErase, MailboxInit
from mailbox_actors.wire.sources import GetAttachment, GetRawMessage

pytestmark = pytest.mark.anyio
NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}


def _mail(attachment: bytes) -> bytes:
    msg = EmailMessage()
    msg["From"] = "Alice <alice@example.com>"
    msg["To"] = "bob@example.com"
    msg["Subject"] = "the report"
    msg["Message-ID"] = "<report-1@example.com>"
    msg.set_content("see attached\n")
    msg.add_attachment(attachment, maintype="application", subtype="octet-stream",
                       filename="report.bin")
    return msg.as_bytes()


async def _read_all(rt: TestRuntime, m: str, req: Any) -> tuple[bytes, list[dict[str, Any]]]:
    parts, chunk, chunks, data = [], 0, 1, b""
    while chunk < chunks:
        got = await rt.call(NS, m, type(req)(**{**{f: getattr(req, f) for f in
                                                  req.__struct_fields__}, "chunk": chunk}),
                            **IDS)
        parts.append(got)
        data += base64.b64decode(got["data"])
        chunk, chunks = chunk + 1, got["chunks"]
    return data, parts


async def test_the_raw_source_and_an_attachment_read_back_byte_for_byte() -> None:
    """UI-2: get_raw_message answers the bytes received, get_attachment one part's decoded
    content, each in 1 MB chunks (a 2.5 MB attachment: several); an unknown message is null; a
    part or chunk out of range is invalid_request."""
    async with TestRuntime() as rt:
        m = rt.id_from_name(NS, "bob")
        await rt.call(NS, m, MailboxInit(), **IDS)
        blob = bytes(range(256)) * 10_000  # 2.56 MB
        raw = _mail(blob)
        got = await rt.call(NS, m, Ingest(source_id="s1", raw=raw), **IDS)
        mid = got["message_id"]
        data, chunks = await _read_all(rt, m, GetRawMessage(message_id=mid))
        assert data == raw and len(chunks) == 4 and chunks[0]["kept"]
        assert chunks[0]["size_bytes"] == len(raw)
        data, chunks = await _read_all(rt, m, GetAttachment(message_id=mid, part=0))
        assert data == blob and len(chunks) == 3
        assert (chunks[0]["filename"], chunks[0]["content_type"]) == (
            "report.bin", "application/octet-stream")
        assert await rt.call(NS, m, GetRawMessage(message_id="imsg_nope"), **IDS) is None
        assert await rt.call(NS, m, GetAttachment(message_id="imsg_nope", part=0), **IDS) is None
        for bad in (GetAttachment(message_id=mid, part=1), GetRawMessage(message_id=mid, chunk=9),
                    GetAttachment(message_id=mid, part=0, chunk=3)):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call(NS, m, bad, **IDS)
            assert e.value.code == "invalid_request"
        with pytest.raises(MailboxActorsError) as e:  # only the owner reads its mail
            await rt.call(NS, m, GetRawMessage(message_id=mid), tenant_id="ten_1",
                          identity_id="idn_other")
        assert e.value.code == "internal_error"  # an owner mismatch (RPC-3)


async def test_the_raw_source_goes_with_its_message_and_with_an_erase() -> None:
    """UI-2, IN-6: deleting a message removes its raw source; erasing the mailbox removes every
    raw source."""
    async with TestRuntime() as rt:
        m = rt.id_from_name(NS, "bob")
        await rt.call(NS, m, MailboxInit(), **IDS)
        first = (await rt.call(NS, m, Ingest(source_id="s1", raw=_mail(b"a")), **IDS))["message_id"]
        await rt.call(NS, m, Ingest(source_id="s2", raw=_mail(b"b").replace(
            b"report-1@", b"report-2@")), **IDS)
        # A small source lies in its message's row, a large one in raw_chunks (sources.py).
        large = (await rt.call(NS, m, Ingest(source_id="s3", raw=_mail(b"c" * 100_000).replace(
            b"report-1@", b"report-3@")), **IDS))["message_id"]
        kept = "SELECT (SELECT count(*) FROM messages WHERE raw IS NOT NULL) + " \
               "(SELECT count(DISTINCT message_id) FROM raw_chunks)"
        assert await rt.run_in_actor(NS, m, lambda a, _s: a.sql.exec(kept).one()[0]) == 3
        await rt.call(NS, m, DeleteMessage(message_id=first), **IDS)
        await rt.call(NS, m, DeleteMessage(message_id=large), **IDS)
        assert await rt.run_in_actor(NS, m, lambda a, _s: a.sql.exec(kept).one()[0]) == 1
        await rt.call(NS, m, MailboxErase(), **IDS)
        assert await rt.run_in_actor(NS, m, lambda a, _s: a.sql.exec(kept).one()[0]) == 0
