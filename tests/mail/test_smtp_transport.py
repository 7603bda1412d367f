"""SmtpTransport against a real aiosmtpd server on loopback (CA-5, CA-8, CA-11): each phase's
refusal, drops before and after the final dot, slow final replies, connection reuse, STARTTLS,
implicit TLS and AUTH."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator

import anyio
import pytest
import trustme

from mailbox_actors.platform.mail.smtp import SmtpConfig, SmtpTransport
from mailbox_actors.testing.smtp import SinkStep, SmtpSink
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


def email(n: int = 1, **kw: object) -> OutboundEmail:
    fields: dict[str, object] = dict(
        email_id=f"eml_{n}", message_id_header=f"<m{n}@mail.example.test>",
        from_="sender@example.test", to=["to@example.test"], subject=f"Subject {n}",
        text="Hello.\n.a line with a leading dot\n")
    fields.update(kw)
    return OutboundEmail(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def sink() -> AsyncIterator[SmtpSink]:
    async with SmtpSink() as s:
        yield s


def transport_for(sink: SmtpSink, **kw: object) -> SmtpTransport:
    return SmtpTransport(SmtpConfig(host=sink.host, port=sink.port, local_hostname="client.test",
                                    **kw))  # type: ignore[arg-type]


async def send_one(sink: SmtpSink, mail: OutboundEmail | None = None,
                   **kw: object) -> TransportOutcome:
    transport = transport_for(sink, **kw)
    try:
        return await transport.send(mail or email())
    finally:
        await transport.aclose()


async def test_accepted_message_as_sent(sink: SmtpSink) -> None:
    """A 250 after the dot is provider_accepted with the relay's queue id; the message carries the
    stable Message-ID, text and html as multipart/alternative, and no Bcc header (CA-8, CA-12)."""
    mail = email(to=["a@example.test"], cc=["c@example.test"], bcc=["hidden@example.test"],
                 html="<p>Hello</p>", headers={"X-Campaign": "7", "Bcc": "evil@example.test"})
    outcome = await send_one(sink, mail)
    assert outcome == ProviderAccepted(provider_message_id=sink.messages[0].queue_id)
    got = sink.messages[0]
    assert got.mail_from == "sender@example.test"
    assert got.rcpt_tos == ["a@example.test", "c@example.test", "hidden@example.test"]
    msg = got.message
    assert msg["Message-ID"] == "<m1@mail.example.test>"
    assert msg["X-Campaign"] == "7"
    assert msg["Bcc"] is None and b"hidden@" not in got.data and b"evil@" not in got.data
    assert msg.get_content_type() == "multipart/alternative"
    parts = [p.get_content_type() for p in msg.iter_parts()]
    assert parts == ["text/plain", "text/html"]
    # Dot-stuffing was undone by the server: the body line is as written.
    assert ".a line with a leading dot" in msg.get_body(("plain",)).get_content()  # type: ignore[union-attr]


async def test_greeting_refusal_is_a_definite_rejection() -> None:
    """A refusal at connect is a rejection of the whole Email: 5yz permanent, 4yz temporary
    (CA-11)."""
    async with SmtpSink(greeting="554 5.3.2 No service here") as sink:
        assert await send_one(sink) == ProviderRejected(code="554 5.3.2", klass="permanent")
    async with SmtpSink(greeting="421 4.3.2 Busy") as sink:
        assert await send_one(sink) == ProviderRejected(code="421 4.3.2", klass="temporary")


async def test_ehlo_refusal_is_a_definite_rejection() -> None:
    """A refusal of EHLO (and of the HELO tried after a 5yz) rejects the Email (CA-11)."""
    async with SmtpSink(ehlo="550 5.7.1 Go away") as sink:
        assert await send_one(sink) == ProviderRejected(code="550 5.7.1", klass="permanent")
        assert sink.messages == []
    async with SmtpSink(ehlo="421 4.7.0 Later") as sink:
        assert await send_one(sink) == ProviderRejected(code="421 4.7.0", klass="temporary")


async def test_connect_failure_is_unreachable() -> None:
    """Nothing listening: unreachable evidence, connect_failed, not a rejection (nothing was
    sent) (CA-8, CA-11, CA-16)."""
    with socket.socket() as probe:  # bound, never listening: refused, and no one else's port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        transport = SmtpTransport(SmtpConfig(host="127.0.0.1", port=port, local_hostname="c.test"))
        assert await transport.send(email()) == Unreachable(failure="connect_failed")
        await transport.aclose()


async def test_a_name_that_does_not_resolve_is_unreachable() -> None:
    """CA-16: a relay host whose name does not resolve (.invalid never does, RFC 2606) is
    unreachable with dns_failed."""
    transport = SmtpTransport(SmtpConfig(host="relay.mailbox-actors.invalid", port=25,
                                         local_hostname="c.test"))
    assert await transport.send(email()) == Unreachable(failure="dns_failed")
    await transport.aclose()


async def test_mail_from_refusals(sink: SmtpSink) -> None:
    """550 at MAIL FROM is permanent; 451 then 250 across two sends: the first is a temporary
    rejection and the second is accepted on the same connection (CA-5, CA-11)."""
    sink.queue(SinkStep(mail="550 5.7.1 Sender not allowed"), SinkStep(mail="451 4.3.0 Try later"))
    transport = transport_for(sink)
    try:
        assert await transport.send(email(1)) == ProviderRejected(code="550 5.7.1",
                                                                  klass="permanent")
        assert await transport.send(email(2)) == ProviderRejected(code="451 4.3.0",
                                                                  klass="temporary")
        third = await transport.send(email(3))
        assert isinstance(third, ProviderAccepted)
        assert [m.message["Message-ID"] for m in sink.messages] == ["<m3@mail.example.test>"]
        assert sink.connections == 1  # refusals leave the session usable (RSET before reuse)
    finally:
        await transport.aclose()


async def test_one_rcpt_of_three_refused(sink: SmtpSink) -> None:
    """A refused RCPT refuses that recipient alone, by position; the others are sent (CA-11)."""
    sink.queue(SinkStep(rcpt={1: "550 5.1.1 No such user"}))
    mail = email(to=["a@example.test", "b@example.test"], cc=["c@example.test"])
    outcome = await send_one(sink, mail)
    assert isinstance(outcome, ProviderAccepted)
    assert outcome.refused == [RecipientRefusal(1, "550 5.1.1", "permanent")]
    assert sink.messages[0].rcpt_tos == ["a@example.test", "c@example.test"]


async def test_every_rcpt_refused_is_a_rejection_listing_them(sink: SmtpSink) -> None:
    """When every RCPT is refused nothing is sent: a rejection carrying each refusal; temporary
    when any refusal was (a retry may reach that recipient) (CA-5, CA-11)."""
    sink.queue(SinkStep(rcpt={0: "550 5.1.1 No", 1: "452 4.2.2 Mailbox full"}))
    outcome = await send_one(sink, email(to=["a@example.test", "b@example.test"]))
    assert outcome == ProviderRejected(code="452 4.2.2", klass="temporary", refused=[
        RecipientRefusal(0, "550 5.1.1", "permanent"),
        RecipientRefusal(1, "452 4.2.2", "temporary")])
    assert sink.messages == []


async def test_data_refused_before_body(sink: SmtpSink) -> None:
    """A refusal of DATA, before any body went, is a definite rejection (CA-11)."""
    sink.queue(SinkStep(data="554 5.5.1 No valid recipients"), SinkStep(data="451 4.3.0 Later"))
    transport = transport_for(sink)
    try:
        assert await transport.send(email(1)) == ProviderRejected(code="554 5.5.1",
                                                                  klass="permanent")
        assert await transport.send(email(2)) == ProviderRejected(code="451 4.3.0",
                                                                  klass="temporary")
        assert sink.messages == []
    finally:
        await transport.aclose()


async def test_drop_at_data_is_temporary(sink: SmtpSink) -> None:
    """The connection lost while DATA waits for its 354: no body went, so a temporary rejection
    (CA-11), and the next send opens a new connection and is accepted."""
    sink.queue(SinkStep(drop="at_data"))
    transport = transport_for(sink)
    try:
        assert await transport.send(email(1)) == ProviderRejected(code="connection_lost",
                                                                  klass="temporary")
        assert isinstance(await transport.send(email(2)), ProviderAccepted)
        assert sink.connections == 2
    finally:
        await transport.aclose()


async def test_drop_inside_body_is_temporary(sink: SmtpSink) -> None:
    """The server closing while the body is still being written (before the final dot) is a
    temporary rejection: a server cannot take a message whose end it never saw (CA-11). The body
    is larger than the socket buffers, so the loss is seen before the dot is written."""
    sink.queue(SinkStep(drop="in_body"))
    big = email(text=("y" * 76 + "\n") * 220_000)  # about 17 MB
    assert await send_one(sink, big) == ProviderRejected(code="connection_lost", klass="temporary")
    assert sink.messages == []


async def test_drop_after_final_dot_is_unknown(sink: SmtpSink) -> None:
    """Body and dot sent, then the connection lost without a reply: outcome_unknown
    (no_final_reply), although the server in fact has the message (CA-4, CA-11)."""
    sink.queue(SinkStep(drop="after_dot"))
    assert await send_one(sink) == OutcomeUnknown(reason="no_final_reply")
    assert len(sink.messages) == 1


async def test_final_refusal_after_dot_is_definite(sink: SmtpSink) -> None:
    """A 5yz reply to the final dot is the server's answer: a permanent rejection (CA-11)."""
    sink.queue(SinkStep(final="552 5.3.4 Message too big"))
    assert await send_one(sink) == ProviderRejected(code="552 5.3.4", klass="permanent")


async def test_slow_final_reply_within_timeout_is_accepted(sink: SmtpSink) -> None:
    """A final reply that comes late but within smtp_timeout_s is an acceptance (CA-11)."""
    sink.queue(SinkStep(hold=True))
    transport = transport_for(sink)
    outcomes: list[TransportOutcome] = []

    async def send() -> None:
        outcomes.append(await transport.send(email()))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await sink.wait_held()
            assert outcomes == []  # the body is there, the reply is not
            sink.release()
        assert isinstance(outcomes[0], ProviderAccepted)
    finally:
        await transport.aclose()


async def test_final_reply_beyond_timeout_is_unknown(sink: SmtpSink) -> None:
    """No final reply within the (small) final-reply timeout: outcome_unknown, and the connection
    is not reused (its late reply must never be taken for another message's) (CA-11, CA-14)."""
    sink.queue(SinkStep(hold=True))
    transport = transport_for(sink, final_timeout_s=0.2)
    try:
        assert await transport.send(email(1)) == OutcomeUnknown(reason="no_final_reply")
        sink.release()
        assert isinstance(await transport.send(email(2)), ProviderAccepted)
        assert sink.connections == 2
    finally:
        await transport.aclose()


async def test_connection_reused_and_reopened(sink: SmtpSink) -> None:
    """Several sends share one connection; one the server closed while idle is replaced without
    failing the send (CA-8)."""
    transport = transport_for(sink)
    try:
        for n in range(5):
            assert isinstance(await transport.send(email(n)), ProviderAccepted)
        assert sink.connections == 1
        sink.drop_idle()
        assert isinstance(await transport.send(email(9)), ProviderAccepted)
        assert sink.connections == 2
        assert len(sink.messages) == 6
    finally:
        await transport.aclose()


async def test_pool_bounds_concurrent_connections(sink: SmtpSink) -> None:
    """Concurrent sends use at most pool_size connections, and each is accepted (CA-8, CA-11)."""
    transport = transport_for(sink, pool_size=2)
    outcomes: list[TransportOutcome] = []

    async def send(n: int) -> None:
        outcomes.append(await transport.send(email(n)))

    try:
        async with anyio.create_task_group() as tg:
            for n in range(6):
                tg.start_soon(send, n)
        assert all(isinstance(o, ProviderAccepted) for o in outcomes) and len(outcomes) == 6
        assert sink.connections <= 2
    finally:
        await transport.aclose()


async def test_header_injection_refused_before_connecting(sink: SmtpSink) -> None:
    """A subject with CR LF never reaches a server: a permanent rejection (invalid_message) (CA-8, CA-11)."""
    outcome = await send_one(sink, email(subject="Hi\r\nBcc: x@example.test"))
    assert outcome == ProviderRejected(code="invalid_message", klass="permanent")
    assert sink.connections == 0


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _contexts(ca: trustme.CA) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def test_starttls_and_auth(ca: trustme.CA) -> None:
    """smtp_tls=starttls upgrades the session before AUTH and MAIL; AUTH logs in with the
    configured account; a wrong password is a permanent 535 rejection (CA-8, CA-11, CA-14)."""
    server_ctx, client_ctx = _contexts(ca)
    async with SmtpSink(tls_context=server_ctx, users={"relay": "s3cret"}) as sink:
        ok = await send_one(sink, tls="starttls", tls_context=client_ctx, username="relay",
                            password="s3cret")
        assert isinstance(ok, ProviderAccepted)
        assert sink.auth_logins == ["relay"]
        bad = await send_one(sink, tls="starttls", tls_context=client_ctx, username="relay",
                             password="wrong")
        assert isinstance(bad, ProviderRejected) and bad.klass == "permanent"
        assert bad.code.startswith("535")
        assert len(sink.messages) == 1


async def test_starttls_refused_or_untrusted(ca: trustme.CA) -> None:
    """A refused STARTTLS is a rejection by its code; a certificate the client does not trust is
    unreachable (tls_failed), and nothing is sent in the clear (CA-11, CA-16)."""
    server_ctx, client_ctx = _contexts(ca)
    async with SmtpSink(tls_context=server_ctx, starttls="454 4.7.0 TLS not available") as sink:
        assert await send_one(sink, tls="starttls", tls_context=client_ctx) == ProviderRejected(
            code="454 4.7.0", klass="temporary")
    async with SmtpSink(tls_context=server_ctx) as sink:
        untrusting = ssl.create_default_context()  # the system store does not know this CA
        assert await send_one(sink, tls="starttls", tls_context=untrusting) == Unreachable(
            failure="tls_failed")  # CA-16: the handshake failed, no server had the message
        assert sink.messages == []
    async with SmtpSink() as sink:  # no STARTTLS offered: never downgraded to plain text
        assert await send_one(sink, tls="starttls", tls_context=client_ctx) == ProviderRejected(
            code="starttls_not_offered", klass="temporary")


async def test_implicit_tls(ca: trustme.CA) -> None:
    """smtp_tls=tls speaks TLS from the first byte (port 465 style) (CA-14)."""
    server_ctx, client_ctx = _contexts(ca)
    async with SmtpSink(tls_context=server_ctx, implicit_tls=True) as sink:
        assert isinstance(await send_one(sink, tls="tls", tls_context=client_ctx),
                          ProviderAccepted)
        assert len(sink.messages) == 1


async def test_non_ascii_address_needs_smtputf8(sink: SmtpSink) -> None:
    """An address outside ASCII to a relay without SMTPUTF8 is a permanent rejection, never a
    mangled address (RFC 6531; CA-11)."""
    outcome = await send_one(sink, email(to=["jürgen@example.test"]))
    assert outcome == ProviderRejected(code="smtputf8_not_offered", klass="permanent")
    assert sink.messages == []


def test_reply_codes_carry_no_text() -> None:
    """Rejection codes are the reply code and its enhanced code, never the reply's text (which may
    echo an address: CL-5)."""
    from mailbox_actors.platform.mail.smtp_client_session import reply_class, reply_code

    assert reply_code(550, "5.1.1 <bob@example.test>: no such user") == "550 5.1.1"
    assert reply_code(451, "Try again later") == "451"
    assert reply_code(-1, "Malformed") == "invalid_reply"
    assert (reply_class(451), reply_class(554), reply_class(-1)) == (
        "temporary", "permanent", "temporary")


async def test_malformed_replies(sink: SmtpSink) -> None:
    """A reply that is not one before the body is a temporary rejection on a connection that is
    not reused; after the final dot it is outcome_unknown, since the server may have taken the
    message (CA-11)."""
    sink.queue(SinkStep(mail="this is not a reply"), SinkStep(final="not a reply either"),
               SinkStep(final="354 again?"))
    transport = transport_for(sink)
    try:
        assert await transport.send(email(1)) == ProviderRejected(code="invalid_reply",
                                                                  klass="temporary")
        assert await transport.send(email(2)) == OutcomeUnknown(reason="invalid_final_reply")
        assert await transport.send(email(3)) == OutcomeUnknown(reason="invalid_final_reply")
        assert isinstance(await transport.send(email(4)), ProviderAccepted)
        assert sink.connections == 4  # every unclear session was closed, never reused
    finally:
        await transport.aclose()


async def test_auth_configured_but_not_offered(sink: SmtpSink) -> None:
    """A username configured for a relay that offers no AUTH is a temporary rejection: the mail is
    never sent unauthenticated (CA-11, CA-14)."""
    outcome = await send_one(sink, username="relay", password="pw")
    assert outcome == ProviderRejected(code="auth_not_offered", klass="temporary")
    assert sink.messages == []


def test_command_paths_are_aiosmtplibs_without_its_parse() -> None:
    """CA-8: MAIL and RCPT carry each address as aiosmtplib would quote it (plain addresses
    written as they are, others through its quoting), and an address that could put more on the
    command line (a parameter, CR LF and a command) never does."""
    from aiosmtplib.email import quote_address

    from mailbox_actors.platform.mail.smtp_paths import path
    plain = ["a@b.c", "A.B+c-d_e@x-y.example", "o'neil@x.com", "x!y%z@h.example",
             "{a}|b~c@h.example", "a=b?c^d`e@h.example"]
    other = ['"a b"@x.example', "a@[192.0.2.1]", " a@x.example ", "Bob <b@x.example>"]
    for address in plain + other:
        assert path(address, "ascii") == quote_address(address).encode("ascii"), address
    for hostile in ["a@x.example> SIZE=1", "a@x.example\r\nRSET", "<a@x.example>"]:
        assert path(hostile, "ascii") == quote_address(hostile).encode("ascii") == b"<a@x.example>"


async def test_quoted_local_part_reaches_the_server(sink: SmtpSink) -> None:
    """CA-8: an address with a quoted local part goes on MAIL and RCPT intact."""
    outcome = await send_one(sink, email(from_='"odd sender"@example.test',
                                         to=['"first last"@example.test', "b@example.test"]))
    assert isinstance(outcome, ProviderAccepted)
    assert sink.messages[0].mail_from == '"odd sender"@example.test'
    assert sink.messages[0].rcpt_tos == ['"first last"@example.test', "b@example.test"]


async def test_a_plain_connection_never_loads_the_trust_store(
        sink: SmtpSink, monkeypatch: pytest.MonkeyPatch) -> None:
    """CA-8: without TLS the transport builds no TLS context (loading the system trust store
    takes tens of milliseconds, which held up every request of the node while a new connection
    opened)."""
    def refuse(*_a: object, **_k: object) -> ssl.SSLContext:
        raise AssertionError("a plain connection loaded the trust store")
    monkeypatch.setattr(ssl, "create_default_context", refuse)
    assert isinstance(await send_one(sink), ProviderAccepted)
