"""Journal copies through the SMTP door (CA-17): every message a transport renders carries the
Email's id; a provider that rewrites Message-ID sends a copy to the configured journal address,
and the door records its Message-ID on the Email it names (learn_message_id), refusing what is no
journal copy of an Email sent here. A real aiosmtplib client on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosmtplib
import pytest

from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.node.smtp_door import SmtpDoor
from mailbox_actors.platform.mail.mime import build_message
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import RecordingTransport, TestRuntime
from mailbox_actors.wire.carrier import ApplyDeliveryEvent, LearnMessageId, Submit
from mailbox_actors.wire.control import Identity
from mailbox_actors.wire.transport import EMAIL_ID_HEADER

pytestmark = pytest.mark.anyio

TOKEN = "cluster-token-0123456789abcdef"
JOURNAL = "journal@carrier.example"
NS = "identity_mailbox"


class Door:
    def __init__(self, rt: TestRuntime, port: int, support: Identity,
                 transport: RecordingTransport) -> None:
        self.rt, self.port, self.support, self.transport = rt, port, support, transport

    async def call(self, req: Any) -> Any:
        return await self.rt.call(NS, self.support.mailbox_id, req,
                                  tenant_id=self.support.tenant_id,
                                  identity_id=self.support.id)

    async def journal(self, raw: bytes) -> tuple[int, str]:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=self.port, timeout=30)
        await client.connect()
        try:
            await client.mail("mailer@provider.example")
            await client.rcpt(JOURNAL)
            reply = await client.data(raw)
        except aiosmtplib.SMTPResponseException as e:
            return e.code, e.message
        finally:
            client.close()
        return reply.code, reply.message


@asynccontextmanager
async def door(tmp_path: Path) -> AsyncIterator[Door]:
    transport = RecordingTransport()
    async with TestRuntime(tmp_path, control=True, services={MAIL_TRANSPORT: transport}) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        support = await create_identity(db, rt.node, tenant.id, "support",
                                        ["support@acme.example"])
        smtp = SmtpDoor.for_node(NodeApp(rt.node, cluster_token=TOKEN,
                                         operator_token=TOKEN + "-op"), rt.node, TOKEN,
                                 max_message_bytes=1 << 20, journal_address=JOURNAL)
        port = await smtp.start("127.0.0.1", 0)
        try:
            yield Door(rt, port, support, transport)
        finally:
            await smtp.stop()


def copy(email_id: str | None, message_id: str = "<0100final@eu.provider.example>",
         sender: str = "Support <support@acme.example>") -> bytes:
    stamp = f"{EMAIL_ID_HEADER}: {email_id}\r\n" if email_id else ""
    return (f"From: {sender}\r\nTo: bob@example.com\r\nSubject: Hello\r\n"
            f"Message-ID: {message_id}\r\n{stamp}\r\nHi Bob\r\n").encode()


async def test_the_door_learns_the_final_message_id_from_a_journal_copy(tmp_path: Path) -> None:
    """CA-17: the rendered message carries the Email's id; a journal copy of it sent to the
    journal address is answered 250 and its Message-ID is learnt: the same again changes
    nothing, and a bounce quoting it finds the Email's Message."""
    async with door(tmp_path) as d:
        r = await d.call(Submit(source_id="s-1", from_="support@acme.example",
                                to=["bob@example.com"], subject="Hello", text="Hi Bob"))
        await d.rt.run_until_idle()
        rendered = build_message(d.transport.sent[0], date_s=0)
        assert f"{EMAIL_ID_HEADER}: {r['email_id']}\r\n".encode() in rendered
        code, _ = await d.journal(copy(r["email_id"]))
        assert code == 250
        again = await d.call(LearnMessageId(email_id=r["email_id"],
                                            message_id="<0100final@eu.provider.example>"))
        assert again["changed"] is False  # the door recorded it already
        out = await d.call(ApplyDeliveryEvent(
            type="delivered", message_id_header="<0100final@eu.provider.example>",
            recipient="bob@example.com", provider_event_id="ev-1"))
        assert out["message_id"] == r["messages"][0]["message_id"] and out["changed"]
        assert (await d.journal(copy(r["email_id"])))[0] == 250  # a repeated copy: the same


async def test_what_is_no_journal_copy_is_refused(tmp_path: Path) -> None:
    """CA-17: a message to the journal address without the stamp, from an address that is no
    identity's, or naming no Email of the sender's mailbox is refused 550; nothing is learnt."""
    async with door(tmp_path) as d:
        r = await d.call(Submit(source_id="s-1", from_="support@acme.example",
                                to=["bob@example.com"], subject="Hello", text="Hi Bob"))
        await d.rt.run_until_idle()
        for raw in (copy(None), copy(r["email_id"], sender="someone@elsewhere.example"),
                    copy("eml_01KDVDNA00SM3JSP5YDYFP42E8")):
            code, _ = await d.journal(raw)
            assert code == 550
        fresh = await d.call(LearnMessageId(email_id=r["email_id"], message_id="<x@provider>"))
        assert fresh["changed"] is True  # no earlier copy was learnt
