"""Unreachable is not rejected (CA-16): a transport failure before the provider could have had the
message queues the Email again with backoff, leaves attempts and provider_rejection as they were,
shows the last failure on the receipt, and after unreachable_window_ms ends it expired."""

from __future__ import annotations

import socket

import pytest

from _carrier import call, email, mailbox, receipt
from mailbox_actors.platform.mail.smtp import SmtpTransport
from mailbox_actors.platform.mail.smtp_client_session import SmtpConfig
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import RecordingTransport, TestRuntime
from mailbox_actors.wire.transport import ProviderRejected, Unreachable

pytestmark = pytest.mark.anyio

MINUTE = 60_000


async def test_an_unreachable_provider_is_retried_and_not_counted() -> None:
    """CA-16, CA-5: unreachable twice, then a temporary rejection, then accepted: attempts counts
    the one rejection only; the receipt shows the last transport failure, kind and time."""
    transport = RecordingTransport([Unreachable(failure="connect_failed"),
                                    Unreachable(failure="dns_failed"),
                                    ProviderRejected(code="451 4.3.0", klass="temporary")])
    async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        await rt.run_until_idle()
        first = await receipt(rt, mid)
        assert first["status"] == "queued" and first["attempts"] == 0
        assert first["provider_rejection"] is None
        assert first["last_transport_failure"] == {"kind": "connect_failed",
                                                   "at_ms": first["updated_at_ms"]}
        assert first["next_attempt_at_ms"] > rt.now_ms()
        await rt.advance(first["next_attempt_at_ms"] - rt.now_ms())
        second = await receipt(rt, mid)
        assert second["status"] == "queued" and second["attempts"] == 0
        assert second["last_transport_failure"]["kind"] == "dns_failed"
        # Backoff grows: the second wait is longer than the first.
        assert (second["next_attempt_at_ms"] - second["updated_at_ms"]
                > first["next_attempt_at_ms"] - first["updated_at_ms"])
        await rt.advance(second["next_attempt_at_ms"] - rt.now_ms())
        third = await receipt(rt, mid)
        assert third["attempts"] == 1 and third["provider_rejection"] == {
            "code": "451 4.3.0", "class": "temporary"}
        await rt.advance(third["next_attempt_at_ms"] - rt.now_ms())
        done = await receipt(rt, mid)
        assert done["status"] == "provider_accepted" and done["attempts"] == 1
        assert done["last_transport_failure"]["kind"] == "dns_failed"  # the last one, kept
        assert transport.calls == 4
        assert len({e.message_id_header for e in transport.sent}) == 1
        requeued = [e.data for e in rt.events.events("email.requeued")]
        assert [d.get("reason") for d in requeued][:2] == ["provider_unreachable"] * 2


async def test_after_the_window_without_a_dispatch_the_email_expires() -> None:
    """CA-16: an Email whose provider stays unreachable for unreachable_window_ms ends expired
    with reason provider_unreachable; its Messages were not sent."""
    transport = RecordingTransport(default=Unreachable(failure="timeout"))
    async with TestRuntime(services={MAIL_TRANSPORT: transport},
                           unreachable_window_ms=10 * MINUTE) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        await rt.run_until_idle()
        for _ in range(50):
            now = await receipt(rt, mid)
            if now["status"] != "queued":
                break
            await rt.advance(now["next_attempt_at_ms"] - rt.now_ms())
        assert now["status"] == "expired" and now["attempts"] == 0
        assert now["provider_rejection"] is None and now["next_attempt_at_ms"] is None
        assert now["last_transport_failure"]["kind"] == "timeout"
        assert now["last_transport_failure"]["at_ms"] - now["created_at_ms"] >= 10 * MINUTE
        assert [m["status"] for m in now["messages"]] == ["not_sent"]
        await rt.run_until_idle()
        expired = rt.events.events("email.expired")
        assert [e.data["reason"] for e in expired] == ["provider_unreachable"]
        sends = transport.calls
        await rt.advance(24 * 60 * MINUTE)
        assert transport.calls == sends  # never tried again


async def test_a_relay_that_is_not_listening_leaves_the_email_queued() -> None:
    """CA-16, CA-11: through the real SMTP transport, a relay port nobody listens on is
    unreachable: queued, no attempt counted, the receipt says connect_failed."""
    with socket.socket() as probe:  # bound, never listening: refused, and no one else's port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        transport = SmtpTransport(SmtpConfig(host="127.0.0.1", port=port,
                                             local_hostname="c.test"))
        try:
            async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
                mid = await mailbox(rt)
                await call(rt, mid, email())
                await rt.run_until_idle()
                got = await receipt(rt, mid)
        finally:
            await transport.aclose()
    assert got["status"] == "queued" and got["attempts"] == 0
    assert got["provider_rejection"] is None
    assert got["last_transport_failure"]["kind"] == "connect_failed"
