"""One Carrier's collaborators and in-memory state (CA-15), which its functions take instead of the
actor that holds them: the store, the host, the transport, the settings, the dispatch gate and
``can_send``, and what this instance knows of its wake and its fresh Emails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec

from mailbox_actors.carrier.fresh import FreshFrom
from mailbox_actors.carrier.host import CarrierHost
from mailbox_actors.carrier.store import EmailRow
from mailbox_actors.carrier.wake import DispatchWake
from mailbox_actors.core.carrier.cap import CapPolicy
from mailbox_actors.platform.mail.transport import Transport
from mailbox_actors.platform.storage.sql import SqlStorage

__all__ = ["CanSendHook", "CarrierSettings", "CarrierState", "DispatchGate", "GateRun"]

# ``can_send(email_id, source_id)``: False records ``superseded``; raising leaves the Email for later (CA-7).
CanSendHook = Callable[[str, str], Awaitable[bool]]


class CarrierSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The per-recipient cap (CA-6); without a transport, how often queued mail is looked at
    again; how long an unreachable provider is retried (CA-16)."""

    recipient_cap: int = 50
    recipient_cap_window_ms: int = 86_400_000
    recheck_ms: int = 300_000
    # CA-16: how long an Email may find its provider unreachable, with no dispatch, before it
    # ends expired (provider_unreachable).
    unreachable_window_ms: int = 86_400_000


class GateRun(Protocol):
    """One dispatch run's use of the gate: ``due`` is how many Emails the run has in sight."""

    due: int

    async def admit(self, row: EmailRow) -> bool:
        """True: the Email may go on to intent; False: it waits (the gate delayed it)."""
        ...

    async def end(self) -> None:
        """The run is over: give back what was reserved and not used."""
        ...


class DispatchGate(Protocol):
    """A check after ``can_send`` and before dispatch intent (IdentityMailbox: TenantQuota,
    RPC-9). ``delay(wait_ms)`` commits every due Email's wait for ``wait_ms`` from now."""

    def run(self, delay: Callable[[int], None]) -> GateRun: ...


class CarrierState:
    __slots__ = ("can_send", "cap", "fresh", "gate", "host", "settings", "sql", "transport",
                 "wake")

    def __init__(self, *, sql: SqlStorage, host: CarrierHost, transport: Transport | None,
                 settings: CarrierSettings, gate: DispatchGate | None,
                 can_send: CanSendHook | None) -> None:
        self.sql = sql
        self.host = host
        self.transport = transport
        self.settings = settings
        # The per-recipient cap (CA-6) as the rule takes it, made once: settings do not change.
        self.cap = CapPolicy(limit=settings.recipient_cap,
                             window_ms=settings.recipient_cap_window_ms)
        self.gate = gate
        self.can_send = can_send
        self.wake = DispatchWake()  # the committed wake, when known
        self.fresh = FreshFrom()  # below which no Email is fresh (fresh.py)
