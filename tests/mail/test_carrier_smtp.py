"""Carrier through the real SMTP transport to a real aiosmtpd server on loopback (CA-4, CA-5,
CA-8, CA-11, CA-12): what each SMTP phase's answer makes of the receipt. FakeClock for the
actor's time, real sockets for the mail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from _carrier import call, email, mailbox, receipt
from mailbox_actors.platform.mail.smtp import SmtpTransport
from mailbox_actors.platform.mail.smtp_client_session import SmtpConfig
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import TestRuntime
from mailbox_actors.testing.smtp import SinkStep, SmtpSink

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def relayed(**config: object) -> AsyncIterator[tuple[TestRuntime, SmtpSink, str]]:
    async with SmtpSink() as sink:
        transport = SmtpTransport(SmtpConfig(host=sink.host, port=sink.port,
                                             local_hostname="carrier.test",
                                             **config))  # type: ignore[arg-type]
        try:
            async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
                yield rt, sink, await mailbox(rt)
        finally:
            await transport.aclose()


async def test_accepted_by_the_relay_with_the_stamped_message_id() -> None:
    """CA-8, CA-12: 250 after the final dot is provider_accepted with the relay's reply as
    evidence; the relay got the Email once, with the Message-ID the receipt shows, to every
    recipient (bcc on the envelope, not in the headers)."""
    async with relayed() as (rt, sink, mid):
        queued = await call(rt, mid, email(to=["a@x.example"], bcc=["hidden@x.example"]))
        await rt.run_until_idle()
        done = await receipt(rt, mid)
        assert done["status"] == "provider_accepted" and done["provider_message_id"]
        assert len(sink.messages) == 1
        got = sink.messages[0]
        assert got.rcpt_tos == ["a@x.example", "hidden@x.example"]
        assert got.message["Message-ID"] == queued["message_id_header"]
        assert got.message["Bcc"] is None


async def test_drop_after_the_final_dot_is_outcome_unknown_and_never_resent() -> None:
    """CA-4, CA-11: the body went and the connection dropped before the final reply: the
    receipt is outcome_unknown and the Email is never offered again, not even by a replay."""
    async with relayed() as (rt, sink, mid):
        sink.queue(SinkStep(drop="after_dot"))
        await call(rt, mid, email())
        await rt.run_until_idle()
        r = await receipt(rt, mid)
        assert r["status"] == "outcome_unknown" and r["attempts"] == 0
        assert await call(rt, mid, email()) == r
        await rt.advance(7 * 86_400_000)
        assert sink.transactions == 1


async def test_451_then_250_is_accepted_after_one_definite_rejection() -> None:
    """CA-5, CA-11, CA-12: a 451 to the final dot is a temporary rejection (queued, attempts 1,
    its code kept); the retry after the backoff gets 250 and ends provider_accepted with attempts
    1; both attempts carried the same Message-ID."""
    async with relayed() as (rt, sink, mid):
        sink.queue(SinkStep(final="451 4.3.0 Try again later"))
        await call(rt, mid, email())
        await rt.run_until_idle()
        waiting = await receipt(rt, mid)
        assert waiting["status"] == "queued" and waiting["attempts"] == 1
        assert waiting["provider_rejection"]["class"] == "temporary"
        assert waiting["provider_rejection"]["code"].startswith("451")
        await rt.advance(waiting["next_attempt_at_ms"] - rt.now_ms())
        done = await receipt(rt, mid)
        assert done["status"] == "provider_accepted" and done["attempts"] == 1
        assert len(sink.messages) == 1  # the 451'd body does not count as received
        assert sink.transactions == 2


async def test_550_at_mail_from_is_rejected() -> None:
    """CA-11: a 5yz refusal at MAIL FROM is a permanent rejection of the whole Email."""
    async with relayed() as (rt, sink, mid):
        sink.queue(SinkStep(mail="550 5.7.1 Sender not allowed"))
        await call(rt, mid, email())
        await rt.run_until_idle()
        r = await receipt(rt, mid)
        assert r["status"] == "rejected" and r["attempts"] == 1
        assert r["provider_rejection"]["class"] == "permanent"
        assert r["provider_rejection"]["code"].startswith("550")
        assert sink.messages == []


async def test_one_rcpt_refused_of_three() -> None:
    """CA-11: a refusal at RCPT TO refuses that recipient's Message alone, with its code; the
    other two go on and the Email is provider_accepted."""
    async with relayed() as (rt, sink, mid):
        sink.queue(SinkStep(rcpt={1: "550 5.1.1 No such user"}))
        await call(rt, mid, email(to=["a@x.example", "b@x.example"], cc=["c@x.example"]))
        await rt.run_until_idle()
        r = await receipt(rt, mid)
        assert r["status"] == "provider_accepted"
        assert [m["status"] for m in r["messages"]] == ["unconfirmed", "refused", "unconfirmed"]
        assert r["messages"][1]["code"].startswith("550")
        assert sink.messages[0].rcpt_tos == ["a@x.example", "c@x.example"]


async def test_every_rcpt_refused_is_rejected_with_each_code() -> None:
    """CA-11: when every recipient is refused at RCPT nothing is sent: the Email is rejected and
    each Message carries its own refusal."""
    async with relayed() as (rt, sink, mid):
        sink.queue(SinkStep(rcpt={0: "550 5.1.1 No such user", 1: "553 5.1.3 Bad address"}))
        await call(rt, mid, email(to=["a@x.example", "b@x.example"]))
        await rt.run_until_idle()
        r = await receipt(rt, mid)
        assert r["status"] == "rejected"
        assert [(m["status"], m["code"][:3]) for m in r["messages"]] == [("refused", "550"),
                                                                         ("refused", "553")]
        assert sink.messages == []
