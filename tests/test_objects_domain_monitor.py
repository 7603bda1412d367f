"""DomainMonitor (OBJ-3): init {domain} and status; the DNS-check ops land beside these."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.domain import DomainInit, DomainStatus
from mailbox_actors.wire.errors import MailboxActorsError


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
