"""RecordingTransport, the fake every Carrier test stands on (CA-8): scripted outcomes in call order,
a default after them, every email recorded, and a hold that keeps a send unanswered until released."""

from __future__ import annotations

import anyio
import pytest

from mailbox_actors.platform.mail.recording import RecordingTransport, TransportClosed
from mailbox_actors.platform.mail.transport import Transport
from mailbox_actors.wire.transport import (
    OutboundEmail,
    OutcomeUnknown,
    ProviderAccepted,
    ProviderRejected,
    TransportOutcome,
)

pytestmark = pytest.mark.anyio


def _email(n: int) -> OutboundEmail:
    return OutboundEmail(email_id=f"eml_{n}", message_id_header=f"<{n}@example.test>",
                         from_="a@example.test", to=["b@example.test"], subject="s", text="t")


async def test_scripted_outcomes_then_default() -> None:
    """Queued outcomes answer the calls in order, then the default answers every later call (CA-8)."""
    rejected = ProviderRejected(code="451 4.3.0", klass="temporary")
    unknown = OutcomeUnknown(reason="no_final_reply")
    fake = RecordingTransport([rejected], default=unknown)
    fake.queue(ProviderAccepted(provider_message_id="p-1"))
    transport: Transport = fake  # it satisfies the protocol the Carrier uses
    answers = [await transport.send(_email(n)) for n in range(4)]
    assert answers == [rejected, ProviderAccepted(provider_message_id="p-1"), unknown, unknown]
    assert [e.email_id for e in fake.sent] == ["eml_0", "eml_1", "eml_2", "eml_3"]
    assert fake.calls == 4


async def test_default_accepts_with_distinct_ids() -> None:
    """Without a script or default every send is accepted with its own provider id (CA-5)."""
    fake = RecordingTransport()
    first = await fake.send(_email(1))
    second = await fake.send(_email(2))
    assert isinstance(first, ProviderAccepted) and isinstance(second, ProviderAccepted)
    assert first.provider_message_id != second.provider_message_id


async def test_scripted_exception_is_raised() -> None:
    """An exception in the script escapes send, as a transport that breaks its promise would (CA-8)."""
    fake = RecordingTransport([ConnectionResetError("boom")])
    with pytest.raises(ConnectionResetError):
        await fake.send(_email(1))
    assert len(fake.sent) == 1  # the attempt is still recorded: the body may have gone


async def test_hold_keeps_send_unanswered_until_release() -> None:
    """A held send is recorded at once and answers only after release, so a test can act while
    the provider 'has the body' (CA-4: dispatch intent before the transport answers)."""
    fake = RecordingTransport([ProviderAccepted(provider_message_id="p-held")])
    fake.hold()
    answers: list[TransportOutcome] = []

    async def sender() -> None:
        answers.append(await fake.send(_email(1)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await fake.wait_entered()
        assert [e.email_id for e in fake.sent] == ["eml_1"]
        assert answers == []
        fake.release()
    assert answers == [ProviderAccepted(provider_message_id="p-held")]
    # After release, sends answer at once.
    assert isinstance(await fake.send(_email(2)), ProviderAccepted)


async def test_held_sends_keep_arrival_order() -> None:
    """Two held sends answer the outcomes in the order they arrived, whatever order they wake in (CA-8)."""
    fake = RecordingTransport([ProviderAccepted(provider_message_id="first"),
                               ProviderRejected(code="550 5.1.1", klass="permanent")])
    fake.hold()
    answers: dict[str, TransportOutcome] = {}

    async def sender(n: int) -> None:
        answers[f"eml_{n}"] = await fake.send(_email(n))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender, 1)
        await fake.wait_entered()
        tg.start_soon(sender, 2)
        await fake.wait_sent(2)
        fake.release()
    assert answers["eml_1"] == ProviderAccepted(provider_message_id="first")
    assert answers["eml_2"] == ProviderRejected(code="550 5.1.1", klass="permanent")


async def test_closed_transport_refuses_and_releases_holds() -> None:
    """aclose lets a held send finish and refuses later sends (CA-8)."""
    fake = RecordingTransport()
    fake.hold()
    results: list[TransportOutcome] = []

    async def sender() -> None:
        results.append(await fake.send(_email(1)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await fake.wait_entered()
        await fake.aclose()
    assert len(results) == 1
    with pytest.raises(TransportClosed):
        await fake.send(_email(2))
