"""Records of the control database (Q-3): tenants, identities, domains and the event index.

These are snapshots of rows, decoded and returned by ``platform.control_db``; they do no I/O. A
``Tenant``'s repr never shows its webhook secret, so logging a record cannot leak it.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "IDENTITY_STATUSES",
    "TENANT_STATUSES",
    "Domain",
    "DomainStateChange",
    "EventIndexRow",
    "Identity",
    "Tenant",
]

# An identity is "creating" until its IdentityMailbox answered init, "active" after, "erased" for good.
IDENTITY_STATUSES: tuple[str, ...] = ("creating", "active", "erased")
TENANT_STATUSES: tuple[str, ...] = ("active",)


class Tenant(msgspec.Struct, frozen=True):
    id: str
    name: str
    events_days: int
    webhook_url: str | None
    webhook_secret: str | None
    created_at_ms: int
    status: str

    def __repr__(self) -> str:
        secret = None if self.webhook_secret is None else "<redacted>"
        return (f"Tenant(id={self.id!r}, name={self.name!r}, events_days={self.events_days}, "
                f"webhook_url={self.webhook_url!r}, webhook_secret={secret}, "
                f"created_at_ms={self.created_at_ms}, status={self.status!r})")


class Identity(msgspec.Struct, frozen=True):
    id: str
    tenant_id: str
    name: str
    mailbox_id: str  # the IdentityMailbox object id (64 lowercase hex)
    status: str  # one of IDENTITY_STATUSES
    created_at_ms: int


class Domain(msgspec.Struct, frozen=True):
    id: str
    tenant_id: str
    name: str
    monitor_id: str  # the DomainMonitor object id (64 lowercase hex)
    created_at_ms: int
    state: str = "pending"  # the monitor's, as its last dispatched event said (DM-4)
    state_at_ms: int | None = None


class DomainStateChange(msgspec.Struct, frozen=True):
    """A DomainMonitor event's state, for the control database's domains row (DM-4)."""

    monitor_id: str
    state: str
    sequence: int
    occurred_at_ms: int


class EventIndexRow(msgspec.Struct, frozen=True):
    """One outbox event as the control database indexes it (EV-2); never carries the event's data."""

    event_id: str
    tenant_id: str
    identity_id: str | None
    namespace: str
    object_id: str
    sequence: int
    type: str
    occurred_at_ms: int
