"""Operations that span the control database and the actors (Q-3): creating tenants, identities and
domains.

Creating an identity mints its IdentityMailbox id, stores it with the identity (status
"creating"), sends ``init`` (which emits identity.created through the outbox) and marks it active.
Every step can be repeated: a retry finds the stored id and ``init`` is idempotent.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol

from mailbox_actors.core.dns.names import NameRefused, normalise_domain
from mailbox_actors.objects.domain_monitor.setup import valid_expected
from mailbox_actors.platform.control.addresses import add_addresses, normalize_all
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.wire.control import Domain, Identity, Tenant
from mailbox_actors.wire.domain import DomainInit, ExpectedRecords
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.mailbox import MailboxInit
from mailbox_actors.wire.quota import QuotaInit

__all__ = ["UNLIMITED", "Caller", "create_domain", "create_identity", "create_tenant"]

# The largest limits a quota takes: in effect none, as for a quota never initialised (Carrier's
# quota gate lets everything through then). Creating an identity initialises its tenant's quota
# with these unless it has limits already, so the roster's letters have somewhere to arrive.
UNLIMITED = 1_000_000_000


class Caller(Protocol):
    """A Node (in process) or a Client (over the network)."""

    def new_unique_id(self, namespace: str) -> Any: ...  # a str, or an awaitable of one

    def id_from_name(self, namespace: str, name: str) -> Any: ...  # likewise

    async def call(self, namespace: str, object_id: str, req: Any, *, tenant_id: str | None = ...,
                   identity_id: str | None = ...) -> Any: ...


async def create_tenant(db: ControlDb, name: str, *, webhook_url: str | None = None,
                        webhook_secret: str | None = None, events_days: int = 30) -> Tenant:
    return await db.create_tenant(name, webhook_url=webhook_url, webhook_secret=webhook_secret,
                                  events_days=events_days)


async def create_identity(db: ControlDb, caller: Caller, tenant_id: str, name: str,
                          addresses: Sequence[str] = ()) -> Identity:
    """Create (or finish creating) the identity; ``addresses`` are given to it (IN-5), checked
    before anything is written."""
    normalize_all(addresses)  # a bad address refuses the whole call up front
    if await db.get_tenant(tenant_id) is None:
        raise MailboxActorsError(ErrorCode.TENANT_NOT_FOUND, "no such tenant")
    existing = await db.get_identity_by_name(tenant_id, name)
    if existing is None:
        mailbox_id = caller.new_unique_id("identity_mailbox")
        if inspect.isawaitable(mailbox_id):
            mailbox_id = await mailbox_id
        existing = await db.create_identity(tenant_id, name, str(mailbox_id))
    if existing.status == "erased":
        raise MailboxActorsError(ErrorCode.CONFLICT, "an identity of this name was erased",
                                 details={"identity_id": existing.id},
                                 fix="Choose another name: an erased identity is not reused.")
    if existing.status == "creating":
        await _ensure_quota(caller, tenant_id)
        await caller.call("identity_mailbox", existing.mailbox_id, MailboxInit(),
                          tenant_id=tenant_id, identity_id=existing.id)
        await db.set_identity_status(existing.id, "active")
        existing = await db.get_identity(existing.id) or existing
    if addresses:
        await add_addresses(db, existing.id, addresses, existing.created_at_ms)
    return existing


async def _ensure_quota(caller: Caller, tenant_id: str) -> None:
    """Initialise the tenant's TenantQuota unless it has limits (then they are kept): the new
    mailbox's roster letter (objects/roster.py) would otherwise be a ``tenant_not_found`` dead
    letter. Before the mailbox's own init, so the letter finds the quota on its first try."""
    quota_id = caller.id_from_name("tenant_quota", tenant_id)
    if inspect.isawaitable(quota_id):
        quota_id = await quota_id
    await caller.call("tenant_quota", str(quota_id),
                      QuotaInit(per_minute=UNLIMITED, per_day=UNLIMITED, keep_existing=True),
                      tenant_id=tenant_id)


async def create_domain(db: ControlDb, caller: Caller, tenant_id: str, name: str,
                        expected: ExpectedRecords | None = None) -> Domain:
    """Register a domain (DM-5): its A-label in the control database with a new DomainMonitor id,
    then ``init`` (which runs the first check at once). Repeating it re-sends init, so expected
    records can be changed; a domain another tenant registered is ``conflict``."""
    try:
        name = normalise_domain(name)
    except NameRefused as e:
        raise InvalidRequest(str(e), details={"field": "name"}) from None
    # Refused here, before the row: init would refuse them too, leaving the name registered to a
    # monitor that never started (status domain_not_found; other tenants refused with conflict).
    valid_expected(name, expected or ExpectedRecords())
    if await db.get_tenant(tenant_id) is None:
        raise MailboxActorsError(ErrorCode.TENANT_NOT_FOUND, "no such tenant")
    domain = await db.get_domain_by_name(name)
    if domain is None:
        monitor_id = caller.new_unique_id("domain_monitor")
        if inspect.isawaitable(monitor_id):
            monitor_id = await monitor_id
        domain = await db.create_domain(tenant_id, name, str(monitor_id))
    if domain.tenant_id != tenant_id:
        raise MailboxActorsError(ErrorCode.CONFLICT, "the domain is registered by another tenant",
                                 details={"field": "name"})
    await caller.call("domain_monitor", domain.monitor_id,
                      DomainInit(domain=name, expected=expected or ExpectedRecords()),
                      tenant_id=tenant_id)
    return await db.get_domain(domain.id) or domain
