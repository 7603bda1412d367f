"""The first cut of IdentityMailbox and DomainMonitor: what exists of OBJ-1 and OBJ-3 so far
(init, status, erase, events); the outbound, inbound and DNS-check ops come later."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.domain import DomainInit, DomainStatus
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.mailbox import MailboxInit, MailboxStatus


@pytest.mark.anyio
async def test_identity_mailbox_status_reports_owner_schema_size_and_alarm(tmp_path: Path) -> None:
    """OBJ-1 (first cut): status gives the owner, schema version, database size, alarm and
    creation time; init by the same owner is idempotent."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        ids = {"tenant_id": "t1", "identity_id": "i1"}
        assert await rt.call("identity_mailbox", m, MailboxInit(), **ids) == {"created": True}
        assert await rt.call("identity_mailbox", m, MailboxInit(), **ids) == {"created": False}
        await rt.run_until_idle()
        st = await rt.call("identity_mailbox", m, MailboxStatus(), **ids)
        assert (st["tenant_id"], st["identity_id"], st["schema_version"]) == ("t1", "i1", 2)
        assert st["size_bytes"] > 0 and st["created_at_ms"] == rt.now_ms()
        assert st["alarm"] == rt.now_ms() + 86_400_000  # the daily maintenance (AL-6)


@pytest.mark.anyio
async def test_domain_monitor_init_status_and_a_different_domain_conflicts(tmp_path: Path) -> None:
    """OBJ-3 (first cut): init {domain} stores the domain as pending and emits domain.created;
    init again with another domain is a conflict; an uninitialised monitor is domain_not_found;
    a malformed domain is invalid_request."""
    async with TestRuntime(tmp_path) as rt:
        d = rt.id_from_name("domain_monitor", "example.com")
        with pytest.raises(MailboxActorsError) as e:
            await rt.call("domain_monitor", d, DomainStatus(), tenant_id="t1")
        assert e.value.code == "domain_not_found"
        with pytest.raises(MailboxActorsError) as e:
            await rt.call("domain_monitor", d, DomainInit(domain="Not A Domain"), tenant_id="t1")
        assert e.value.code == "invalid_request"
        await rt.call("domain_monitor", d, DomainInit(domain="example.com"), tenant_id="t1")
        st = await rt.call("domain_monitor", d, DomainStatus(), tenant_id="t1")
        assert (st["domain"], st["state"], st["tenant_id"]) == ("example.com", "pending", "t1")
        with pytest.raises(MailboxActorsError) as e:
            await rt.call("domain_monitor", d, DomainInit(domain="other.org"), tenant_id="t1")
        assert e.value.code == "conflict"
        await rt.run_until_idle()
        assert [ev.type for ev in rt.events.events()] == ["domain.created"]
