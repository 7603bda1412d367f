"""The ``can_send`` hook (CA-7): the host's last word before an Email is dispatched.

A source that owns replaceable notifications (invitations, one-time links) registers a hook under
``CAN_SEND``. It must consult the source of truth: answer False for a definitely obsolete Email
(recorded ``superseded``, never sent) and raise when that truth is unavailable (the Email stays
queued and is checked again later). It is a pre-dispatch check, not an atomic fence against a
concurrent change at the source. Without a hook every Email may be sent.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from mailbox_actors.platform.services import ServiceKey

__all__ = ["CAN_SEND", "CanSend", "SendCheck"]


class SendCheck(msgspec.Struct, frozen=True, kw_only=True):
    """Which Email is about to be dispatched (ids only)."""

    tenant_id: str
    identity_id: str
    email_id: str
    source_id: str


class CanSend(Protocol):
    async def __call__(self, check: SendCheck) -> bool: ...


CAN_SEND: ServiceKey[CanSend] = ServiceKey("can_send")
