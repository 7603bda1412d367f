"""SmtpTransport against a hostile SMTP server on loopback (CA-11; mail is hostile): replies that
are binary, over any line limit, endless multi-line replies, at every phase. Before the final dot
each is a temporary rejection; after it, outcome_unknown; nothing raises, and the transport goes on
sending through a well-behaved server afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from mailbox_actors.platform.mail.smtp import SmtpConfig, SmtpTransport
from mailbox_actors.wire.transport import (
    OutboundEmail,
    OutcomeUnknown,
    ProviderAccepted,
    ProviderRejected,
    TransportOutcome,
)

pytestmark = pytest.mark.anyio

HUGE_LINE = b"250 " + b"9" * 2_000_000 + b"\r\n"  # far past any SMTP line limit
ENDLESS = b"250-more\r\n" * 300_000  # a multi-line reply that never ends (3 MB)
BINARY = b"\x00\xff\xfe\x01 not a reply\r\n"
HOSTILE = {"huge_line": HUGE_LINE, "endless_multiline": ENDLESS, "binary": BINARY}
PHASES = (b"EHLO", b"MAIL", b"RCPT", b"DATA")

Reply = Callable[[bytes], bytes | None]


def email() -> OutboundEmail:
    return OutboundEmail(email_id="eml_1", message_id_header="<m1@mail.example.test>",
                         from_="sender@example.test", to=["to@example.test"], subject="S",
                         text="Hello.\n")


def polite(line: bytes) -> bytes:
    verb = line[:4].upper()
    return {b"EHLO": b"250-hostile.test\r\n250 8BITMIME\r\n", b"DATA": b"354 go on\r\n",
            b"QUIT": b"221 bye\r\n"}.get(verb, b"250 ok\r\n")


@asynccontextmanager
async def hostile_server(greeting: bytes, reply: Reply, final: bytes) -> AsyncIterator[int]:
    """A raw SMTP server: ``greeting`` first, ``reply(line)`` to each command (None: the script
    is over, close), ``final`` to the body's final dot."""

    async def session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(greeting)
            in_body = False
            while line := await reader.readline():
                if in_body:
                    if line == b".\r\n":
                        writer.write(final)
                        in_body = False
                    continue
                out = reply(line)
                if out is None:
                    break
                writer.write(out)
                in_body = out.startswith(b"354")
                await writer.drain()
            await writer.drain()
        except ConnectionError:
            pass  # the client gave up on us: what a hostile server earns
        finally:
            writer.close()

    server = await asyncio.start_server(session, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def send_to(port: int) -> TransportOutcome:
    transport = SmtpTransport(SmtpConfig(host="127.0.0.1", port=port, local_hostname="c.test",
                                         command_timeout_s=30, final_timeout_s=30))
    try:
        return await transport.send(email())
    finally:
        await transport.aclose()


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_a_hostile_greeting_is_a_temporary_rejection(name: str) -> None:
    """CA-11: a greeting that is binary, one line of 2 MB or an endless multi-line 220 is a
    temporary rejection at connect (nothing was sent), never an exception or a hang."""
    greeting = HOSTILE[name].replace(b"250", b"220")
    async with hostile_server(greeting, polite, b"250 ok\r\n") as port:
        outcome = await send_to(port)
    assert isinstance(outcome, ProviderRejected) and outcome.klass == "temporary", outcome


@pytest.mark.parametrize("phase", PHASES, ids=[p.decode() for p in PHASES])
@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_a_hostile_reply_before_the_body_is_a_temporary_rejection(
        name: str, phase: bytes) -> None:
    """CA-11: a hostile reply to EHLO, MAIL, RCPT or DATA (before any of the body went) is a
    temporary rejection; the same transport then sends through a well-behaved server."""

    def reply(line: bytes) -> bytes:
        return HOSTILE[name] if line[:4].upper() == phase else polite(line)

    async with hostile_server(b"220 hostile.test\r\n", reply, b"250 ok\r\n") as port:
        outcome = await send_to(port)
    assert outcome == ProviderRejected(code="invalid_reply", klass="temporary"), outcome


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_a_hostile_final_reply_is_outcome_unknown(name: str) -> None:
    """CA-4, CA-11: after the final dot the server may hold the message, so a hostile answer to
    it is outcome_unknown (never accepted, never a rejection that would send it again)."""
    async with hostile_server(b"220 hostile.test\r\n", polite, HOSTILE[name]) as port:
        outcome = await send_to(port)
    assert outcome == OutcomeUnknown(reason="invalid_final_reply"), outcome


async def test_a_reply_of_undecodable_bytes_after_the_dot_is_read_as_its_code() -> None:
    """CA-11: a 250 whose text is not UTF-8 is still an acceptance by its code; the queue id is
    taken only when it is plain ASCII (else the stable Message-ID stands in)."""
    async with hostile_server(b"220 hostile.test\r\n", polite,
                              b"250 \xff\xfe queued as \xff\xfe\r\n") as port:
        outcome = await send_to(port)
    assert outcome == ProviderAccepted(provider_message_id="<m1@mail.example.test>")


async def test_the_transport_opens_a_fresh_connection_after_a_hostile_reply() -> None:
    """CA-8, CA-11: a connection a hostile reply broke is never reused: the next send opens a
    fresh session, which the (now well-behaved) server accepts."""
    mails = 0

    def reply(line: bytes) -> bytes:
        nonlocal mails
        if line[:4].upper() == b"MAIL":
            mails += 1
            if mails == 1:
                return ENDLESS
        return polite(line)

    async with hostile_server(b"220 hostile.test\r\n", reply, b"250 ok\r\n") as port:
        transport = SmtpTransport(SmtpConfig(host="127.0.0.1", port=port,
                                             local_hostname="c.test"))
        try:
            assert await transport.send(email()) == ProviderRejected(code="invalid_reply",
                                                                     klass="temporary")
            assert await transport.send(email()) == ProviderAccepted(
                provider_message_id="<m1@mail.example.test>")
            assert transport.connections_opened == 2
        finally:
            await transport.aclose()
