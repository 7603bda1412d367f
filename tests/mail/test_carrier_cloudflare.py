"""Carrier through the Cloudflare-style transport to a loopback server answering like the Email
Service send API (CA-5, CA-8): each documented code's class on the receipt, and every other
answer outcome_unknown."""

from __future__ import annotations

import pytest

from _carrier import call, email, mailbox, receipt
from mailbox_actors.http.client import HttpPool
from mailbox_actors.platform.mail.cloudflare import CloudflareTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import TestRuntime
from mailbox_actors.testing.cloudflare import CloudflareSink, error_reply

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("code", "status", "attempts", "rejection"), [
    ("E_RATE_LIMIT_EXCEEDED", "provider_accepted", 1, "temporary"),
    ("E_INTERNAL_SERVER_ERROR", "provider_accepted", 1, "temporary"),
    ("E_SENDER_NOT_VERIFIED", "rejected", 1, "permanent"),
    ("E_HEADER_NOT_ALLOWED", "rejected", 1, "permanent"),
    ("E_DELIVERY_FAILED", "outcome_unknown", 0, None),
    ("E_SOMETHING_UNDOCUMENTED", "outcome_unknown", 0, None),
    (None, "outcome_unknown", 0, None),
])
async def test_each_answer_on_the_receipt(code: str | None, status: str, attempts: int,
                                          rejection: str | None) -> None:
    """CA-5: a temporary code puts the Email back in the queue and its retry (answered with
    success) ends provider_accepted with attempts 1; a permanent code ends rejected; the
    delivery-failed code, an undocumented code and an error without a code are outcome_unknown
    and never sent again."""
    async with CloudflareSink() as cf:
        cf.queue(error_reply(code))
        transport = CloudflareTransport(cf.url, "tok-carrier", http=HttpPool())
        try:
            async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
                mid = await mailbox(rt)
                await call(rt, mid, email())
                await rt.run_until_idle()
                await rt.advance(3_600_000)
                r = await receipt(rt, mid)
                assert r["status"] == status and r["attempts"] == attempts
                if rejection is None:
                    assert r["provider_rejection"] is None
                else:
                    assert r["provider_rejection"] == {"code": code, "class": rejection}
                assert len(cf.requests) == (2 if rejection == "temporary" else 1)
                assert cf.requests[0].json["headers"]["Message-ID"] == r["message_id_header"]
        finally:
            await transport.aclose()
