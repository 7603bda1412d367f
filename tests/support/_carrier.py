"""Helpers for the Carrier tests: an initialised IdentityMailbox and short calls to it."""

from __future__ import annotations

from typing import Any

from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import GetEmail, Submit
from mailbox_actors.wire.mailbox import MailboxInit

NS = "identity_mailbox"
OWNER = {"tenant_id": "acme", "identity_id": "idn_support"}


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
