"""Traceability (seed section 3: all time from the Clock): the Date header of outbound mail comes
from the transport's Clock, so under a FakeClock the bytes a real SMTP server receives are the
same in every run; the node gives its transport its own clock."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.mail.smtp import SmtpTransport
from mailbox_actors.platform.mail.smtp_client_session import SmtpConfig
from mailbox_actors.testing.smtp import SmtpSink
from mailbox_actors.wire.transport import OutboundEmail

pytestmark = pytest.mark.anyio

EMAIL = OutboundEmail(email_id="eml_1", message_id_header="<one@carrier.test>",
                      from_="a@example.com", to=["b@example.com"], subject="hello",
                      text="body")


async def _sent(at_ms: int) -> bytes:
    clock = FakeClock(at_ms)
    async with SmtpSink() as sink:
        transport = SmtpTransport(SmtpConfig(host=sink.host, port=sink.port,
                                             local_hostname="carrier.test"), clock=clock)
        try:
            await transport.send(EMAIL)
            clock.set_ms(at_ms + 999)  # the same second: the same Date
            await transport.send(EMAIL)
        finally:
            await transport.aclose()
        assert len(sink.messages) == 2 and sink.messages[0].data == sink.messages[1].data
        return sink.messages[0].data


async def test_the_date_header_is_the_clocks_and_the_bytes_repeat() -> None:
    """The Date header is the FakeClock's second (RFC 5322 form, GMT), not the machine's time;
    two runs at the same fake time send byte-identical messages; another fake time changes the
    Date line and nothing else."""
    t = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    first, again, later = await _sent(t), await _sent(t), await _sent(t + 86_400_000)
    assert first == again
    assert f"Date: {formatdate(t // 1000, usegmt=True)}".encode() in first
    assert b"Date: Thu, 01 Jan 2026 00:00:00 GMT" in first
    diff = [(a, b) for a, b in zip(first.split(b"\r\n"), later.split(b"\r\n"), strict=True)
            if a != b]
    assert diff == [(b"Date: Thu, 01 Jan 2026 00:00:00 GMT", b"Date: Fri, 02 Jan 2026 00:00:00 GMT")]


async def test_the_node_gives_its_smtp_transport_its_clock(tmp_path: object) -> None:
    """The transport a node makes from its settings dates mail by the node's clock."""
    from mailbox_actors.node.mail import transport_from_settings
    from mailbox_actors.runtime.settings import RuntimeSettings

    clock = FakeClock(1_767_225_600_000)
    settings = RuntimeSettings(data_dir=str(tmp_path), transport="smtp", smtp_host="127.0.0.1")
    transport = transport_from_settings(settings, clock)
    assert isinstance(transport, SmtpTransport)
    assert transport._clock is clock
