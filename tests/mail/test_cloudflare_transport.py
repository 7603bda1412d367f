"""The Cloudflare-style transport against a real HTTP server on loopback (CA-5, CA-8, CA-14):
every code of CA-5's table decoded to its class, E_DELIVERY_FAILED, unknown and missing codes as
outcome_unknown, a 2xx as provider_accepted with its id, and the node building it from settings."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mailbox_actors.http.client import HttpPool
from mailbox_actors.platform.mail.cloudflare import (
    PERMANENT_CODES,
    TEMPORARY_CODES,
    CloudflareTransport,
)
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT, TransportClosed
from mailbox_actors.testing import TestRuntime
from mailbox_actors.testing.cloudflare import CloudflareSink, SinkReply, error_reply
from mailbox_actors.wire.transport import (
    OutboundEmail,
    OutcomeUnknown,
    ProviderAccepted,
    ProviderRejected,
    RecipientRefusal,
    TransportOutcome,
    Unreachable,
)

pytestmark = pytest.mark.anyio

MAIL = OutboundEmail(email_id="eml_1", message_id_header="<m1@mail.example.test>",
                     from_="sender@example.test", to=["a@example.test", "b@example.test"],
                     bcc=["hidden@example.test"], subject="Hello", text="Hi.",
                     headers={"X-Campaign": "7"})


@pytest.fixture
async def cf() -> AsyncIterator[CloudflareSink]:
    async with CloudflareSink() as sink:
        yield sink


async def send(url: str, mail: OutboundEmail = MAIL, **kw: float) -> TransportOutcome:
    transport = CloudflareTransport(url, "tok-123", http=HttpPool(), **kw)
    try:
        return await transport.send(mail)
    finally:
        await transport.aclose()


async def test_accepted_with_its_id_and_request_shape(cf: CloudflareSink) -> None:
    """A 2xx success is provider_accepted with result.messageId; the request is a bearer-token POST
    of the send_email builder's fields, the Message-ID and the Email's id among its headers (CA-5,
    CA-8, CA-12, CA-17)."""
    assert await send(cf.url) == ProviderAccepted(provider_message_id="cf-1")
    req = cf.requests[0]
    assert req.path == cf.path
    assert req.headers["authorization"] == "Bearer tok-123"
    assert req.json == {"from": "sender@example.test", "to": ["a@example.test", "b@example.test"],
                        "bcc": ["hidden@example.test"], "subject": "Hello", "text": "Hi.",
                        "headers": {"X-Campaign": "7", "Message-ID": "<m1@mail.example.test>",
                                    "X-Mailbox-Actors-Email-Id": "eml_1"}}


async def test_rest_shaped_success_maps_permanent_bounces(cf: CloudflareSink) -> None:
    """A success whose result lists delivered/permanent_bounces (the REST API's shape) is accepted
    under the Message-ID, and each permanently bounced recipient is refused by position (CA-5)."""
    cf.queue(SinkReply(200, b'{"success":true,"errors":[],"result":{"delivered":'
                            b'["a@example.test"],"permanent_bounces":["B@example.test"],'
                            b'"queued":[]}}'))
    assert await send(cf.url) == ProviderAccepted(
        provider_message_id="<m1@mail.example.test>",
        refused=[RecipientRefusal(1, "permanent_bounce", "permanent")])


@pytest.mark.parametrize("code", sorted(TEMPORARY_CODES))
async def test_temporary_codes(cf: CloudflareSink, code: str) -> None:
    """CA-5's temporary codes are provider_rejected with class temporary."""
    cf.queue(error_reply(code, status=429 if "LIMIT" in code else 500))
    assert await send(cf.url) == ProviderRejected(code=code, klass="temporary")


@pytest.mark.parametrize("code", sorted(PERMANENT_CODES))
async def test_permanent_codes(cf: CloudflareSink, code: str) -> None:
    """CA-5's sender, recipient, validation, size and header codes are permanent rejections."""
    cf.queue(error_reply(code))
    assert await send(cf.url) == ProviderRejected(code=code, klass="permanent")


def test_the_table_is_exactly_ca5s() -> None:
    """The transport knows exactly CA-5's 3 temporary and 16 permanent codes, and
    E_DELIVERY_FAILED is in neither."""
    assert len(TEMPORARY_CODES) == 3 and len(PERMANENT_CODES) == 16
    assert "E_DELIVERY_FAILED" not in TEMPORARY_CODES | PERMANENT_CODES


@pytest.mark.parametrize(("reply", "reason"), [
    (error_reply("E_DELIVERY_FAILED", status=500), "provider_code:E_DELIVERY_FAILED"),
    (error_reply("E_SOMETHING_NEW"), "provider_code:E_SOMETHING_NEW"),
    (error_reply(10001), "provider_code:10001"),  # the REST API's numeric codes: undocumented
    (error_reply(None, status=500), "no_error_code"),
    (SinkReply(502, b"<html>Bad gateway</html>"), "no_error_code"),
    (SinkReply(200, b'{"success":false,"errors":[]}'), "no_error_code"),
])
async def test_undocumented_errors_are_unknown(cf: CloudflareSink, reply: SinkReply,
                                               reason: str) -> None:
    """E_DELIVERY_FAILED, unknown codes and errors without a code are outcome_unknown: some
    recipients may already have been accepted (CA-5)."""
    cf.queue(reply)
    assert await send(cf.url) == OutcomeUnknown(reason=reason)


@pytest.mark.parametrize(("reply", "expected"), [
    (SinkReply(500, b'{"errors":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
     OutcomeUnknown(reason="no_error_code")),
    (SinkReply(500, b"\xff\xfe" * 1000), OutcomeUnknown(reason="no_error_code")),
    (SinkReply(500, b'{"errors":[{"code":"' + b"E" * 100_000 + b'"}]}'),
     OutcomeUnknown(reason="provider_code:undocumented")),
    (SinkReply(200, b"x" * (17 * 1024 * 1024)), OutcomeUnknown(reason="no_response")),
])
async def test_hostile_answers_are_decoded_without_raising(cf: CloudflareSink, reply: SinkReply,
                                                           expected: TransportOutcome) -> None:
    """Hostile input (CA-5): JSON nested 100,000 deep, bytes that are not UTF-8, a code of
    100,000 characters (never quoted) and a body over the client's 16 MB cap each give an
    outcome, never an exception."""
    cf.queue(reply)
    assert await send(cf.url) == expected


async def test_success_false_with_a_code_is_decoded(cf: CloudflareSink) -> None:
    """An answer that says success false is an error even with a 200 status (CA-5)."""
    cf.queue(SinkReply(200, b'{"success":false,"errors":[{"code":"E_SENDER_NOT_VERIFIED"}]}'))
    assert await send(cf.url) == ProviderRejected(code="E_SENDER_NOT_VERIFIED", klass="permanent")


async def test_no_answer_in_time_is_unknown(cf: CloudflareSink) -> None:
    """The request went and no answer came within the timeout: outcome_unknown (CA-5)."""
    cf.queue(SinkReply(hold=True))
    assert await send(cf.url, timeout_s=0.2) == OutcomeUnknown(reason="no_response")
    cf.release()


async def test_nothing_listening_is_unreachable() -> None:
    """A connection that could not be opened sent nothing: unreachable, connect_failed, not a
    rejection (CA-5, CA-16)."""
    with socket.socket() as probe:  # bound, never listening: refused, and no one else's port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        assert await send(f"http://127.0.0.1:{port}/send") == Unreachable(
            failure="connect_failed")


async def test_node_builds_it_from_settings(cf: CloudflareSink, tmp_path: Path) -> None:
    """transport=cloudflare with cloudflare_url and cloudflare_token_file gives objects a
    CloudflareTransport using the file's token; the node closes it at stop (CA-14)."""
    token = tmp_path / "token"
    token.write_text("file-token\n")
    async with TestRuntime(transport="cloudflare", cloudflare_url=cf.url,
                           cloudflare_token_file=str(token)) as rt:
        transport = rt.node.host.services.get(MAIL_TRANSPORT)
        assert isinstance(transport, CloudflareTransport)
        assert isinstance(await transport.send(MAIL), ProviderAccepted)
        assert cf.requests[0].headers["authorization"] == "Bearer file-token"
    with pytest.raises(TransportClosed):
        await transport.send(MAIL)
