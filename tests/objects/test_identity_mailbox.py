"""IdentityMailbox (OBJ-1): init, status, erase, events and its daily maintenance; the outbound,
inbound and inspection ops land beside these."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.objects import IdentityMailbox
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.control import Identity, Tenant
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
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
        assert (st["tenant_id"], st["identity_id"]) == ("t1", "i1")
        assert st["schema_version"] == len(IdentityMailbox.migrations)
        assert st["size_bytes"] > 0 and st["created_at_ms"] == rt.now_ms()
        assert st["alarm"] == rt.now_ms() + 86_400_000  # the daily maintenance (AL-6)


DAY = 86_400_000


async def alice(rt: TestRuntime) -> tuple[ControlDb, Tenant, Identity]:
    """The control database, a tenant and its identity "alice", her identity.created delivered."""
    db = rt.node.control_db
    assert db is not None
    tenant = await db.create_tenant("acme")
    ident = await create_identity(db, rt.node, tenant.id, "alice")
    await rt.run_until_idle()
    return db, tenant, ident


@pytest.mark.anyio
async def test_daily_maintenance_survives_the_control_database_being_away(
        tmp_path: Path) -> None:
    """AL-6: maintenance that cannot read the tenant's events_days still runs (keeping every
    event this time) and re-arms for the next day."""
    async with TestRuntime(tmp_path, control=True) as rt:
        db, tenant, ident = await alice(rt)
        await db.close()
        await rt.advance(DAY + 300_000)
        status = await rt.call("identity_mailbox", ident.mailbox_id, MailboxStatus(),
                               tenant_id=tenant.id, identity_id=ident.id)
        assert status["alarm"] is not None and status["alarm"] > rt.now_ms() + DAY // 2
        await db.open()


@pytest.mark.anyio
@pytest.mark.parametrize("forged", ["identity.created", "identity.erased"])
async def test_emit_event_cannot_forge_the_mailboxs_own_lifecycle_events(
        tmp_path: Path, forged: str) -> None:
    """EV-1, OBJ-1: identity.created and identity.erased come from init and erase only; a caller's
    emit_event of either is invalid_request, so receivers can trust them."""
    from mailbox_actors.wire.events import EmitEvent, GetEvents
    from mailbox_actors.wire.mailbox import MailboxInit

    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        ids = {"tenant_id": "t1", "identity_id": "i1"}
        await rt.call("identity_mailbox", m, MailboxInit(), **ids)
        with pytest.raises(MailboxActorsError) as info:
            await rt.call("identity_mailbox", m, EmitEvent(type=forged), **ids)
        assert info.value.code is ErrorCode.INVALID_REQUEST
        events = (await rt.call("identity_mailbox", m, GetEvents(), **ids))["events"]
        assert [e["type"] for e in events] == ["identity.created"]
