"""Helpers for the Carrier tests: an initialised IdentityMailbox and short calls to it.

``Scripted`` is the tests' own stand-in for ``platform.mail.recording.RecordingTransport`` until
that lands: scripted outcomes per call, every email recorded, and a hold that keeps a send
waiting (the body given, no answer yet).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio

from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import GetEmail, Submit
from mailbox_actors.wire.mailbox import MailboxInit
from mailbox_actors.wire.transport import OutboundEmail, ProviderAccepted, TransportOutcome

NS = "identity_mailbox"
OWNER = {"tenant_id": "acme", "identity_id": "idn_support"}


class Scripted:
    def __init__(self, *outcomes: TransportOutcome | BaseException) -> None:
        self.script: deque[TransportOutcome | BaseException] = deque(outcomes)
        self.sent: list[OutboundEmail] = []
        self.held: anyio.Event | None = None
        self.entered = anyio.Event()

    def queue(self, *outcomes: TransportOutcome | BaseException) -> None:
        self.script.extend(outcomes)

    def hold(self) -> None:
        self.held = anyio.Event()

    def release(self) -> None:
        if self.held is not None:
            self.held.set()
            self.held = None

    async def send(self, email: OutboundEmail) -> TransportOutcome:
        self.sent.append(email)
        outcome = (self.script.popleft() if self.script
                   else ProviderAccepted(provider_message_id=f"p-{len(self.sent)}"))
        held = self.held
        if held is not None:
            self.entered.set()
            await held.wait()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def aclose(self) -> None:
        self.release()


async def mailbox(rt: TestRuntime, name: str = "support") -> str:
    mid = rt.id_from_name(NS, name)
    await rt.call(NS, mid, MailboxInit(), **OWNER)
    return mid


def email(source_id: str = "s-1", **kw: Any) -> Submit:
    fields: dict[str, Any] = {"from_": "support@acme.example", "to": ["bob@example.com"],
                              "subject": "Hello", "text": "Hi Bob"} | kw
    return Submit(source_id=source_id, **fields)


async def call(rt: TestRuntime, mid: str, req: Any) -> Any:
    return await rt.call(NS, mid, req, **OWNER)


async def receipt(rt: TestRuntime, mid: str, source_id: str = "s-1") -> Any:
    return await call(rt, mid, GetEmail(source_id=source_id))
