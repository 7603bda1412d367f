"""Learned Message-IDs (CA-17): the final Message-ID a rewriting provider gave an Email is
recorded once on it; bounces quoting it find its Messages, and replies quoting the stamped or the
learned id share a thread."""

from __future__ import annotations

from typing import Any

import pytest

from _carrier import call, email, mailbox
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import RecordingTransport, TestRuntime
from mailbox_actors.wire.carrier import ApplyDeliveryEvent, LearnMessageId
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.inbound import GetThread, Ingest

pytestmark = pytest.mark.anyio


def reply(n: int, in_reply_to: str) -> bytes:
    return (f"From: <bob@example.com>\r\nTo: support@acme.example\r\nSubject: Re: Hello\r\n"
            f"Message-ID: <reply-{n}@example.com>\r\nIn-Reply-To: {in_reply_to}\r\n\r\n"
            f"reply {n}\r\n").encode()


async def sent(rt: TestRuntime, mid: str, source_id: str = "s-1") -> dict[str, Any]:
    got: dict[str, Any] = await call(rt, mid, email(source_id))
    await rt.run_until_idle()
    return got


async def test_learn_message_id_records_once_and_refuses_another() -> None:
    """CA-17: the provider's id is recorded (brackets optional); the same again changes nothing;
    another is conflict; an unknown email is email_not_found; something not a Message-ID is
    invalid_request."""
    async with TestRuntime(services={MAIL_TRANSPORT: RecordingTransport()}) as rt:
        mid = await mailbox(rt)
        r = await sent(rt, mid)
        learn = LearnMessageId(email_id=r["email_id"], message_id="<0100abc@eu-west-1.ses>")
        first = await call(rt, mid, learn)
        assert first == {"email_id": r["email_id"], "message_id_header": r["message_id_header"],
                         "learned_message_id": "<0100abc@eu-west-1.ses>", "changed": True}
        again = await call(rt, mid, LearnMessageId(email_id=r["email_id"],
                                                   message_id="0100abc@eu-west-1.ses"))
        assert again["changed"] is False
        await rt.run_until_idle()
        assert [e.type for e in rt.events.events("email.message_id_learned")] == [
            "email.message_id_learned"]
        for bad, code in ((LearnMessageId(email_id=r["email_id"], message_id="<other@ses>"),
                           ErrorCode.CONFLICT),
                          (LearnMessageId(email_id="eml_01KDVDNA00SM3JSP5YDYFP42E8",
                                          message_id="<x@ses>"), ErrorCode.EMAIL_NOT_FOUND),
                          (LearnMessageId(email_id=r["email_id"], message_id="no at sign"),
                           ErrorCode.INVALID_REQUEST)):
            with pytest.raises(MailboxActorsError) as e:
                await call(rt, mid, bad)
            assert e.value.code == code


async def test_a_bounce_quoting_the_learned_id_finds_the_message() -> None:
    """CA-17, CA-9: a delivery event naming the learned Message-ID and the recipient applies to
    the Email's Message as one naming the stamped id does."""
    async with TestRuntime(services={MAIL_TRANSPORT: RecordingTransport()}) as rt:
        mid = await mailbox(rt)
        r = await sent(rt, mid)
        await call(rt, mid, LearnMessageId(email_id=r["email_id"], message_id="<final-1@ses>"))
        out = await call(rt, mid, ApplyDeliveryEvent(
            type="bounced", bounce="hard", message_id_header="<final-1@ses>",
            recipient="Bob@Example.com", provider_event_id="ev-1"))
        assert out["message_id"] == r["messages"][0]["message_id"]
        assert out["status"] == "bounced_hard" and out["changed"] is True


@pytest.mark.parametrize("order", ["stamped_first", "learned_first"])
async def test_replies_quoting_the_stamped_or_the_learned_id_share_a_thread(order: str) -> None:
    """CA-17, IN-2: once the id is learnt, a reply quoting the provider's id and one quoting the
    stamped id land in one thread, whichever arrives first."""
    async with TestRuntime(services={MAIL_TRANSPORT: RecordingTransport()}) as rt:
        mid = await mailbox(rt)
        r = await sent(rt, mid)
        await call(rt, mid, LearnMessageId(email_id=r["email_id"], message_id="<final-2@ses>"))
        quotes = [r["message_id_header"], "<final-2@ses>"]
        if order == "learned_first":
            quotes.reverse()
        got = [await call(rt, mid, Ingest(source_id=f"r{n}", raw=reply(n, q)))
               for n, q in enumerate(quotes)]
        assert got[0]["thread_id"] == got[1]["thread_id"]
        thread = await call(rt, mid, GetThread(thread_id=got[0]["thread_id"]))
        assert thread["message_ids"] == [g["message_id"] for g in got]
