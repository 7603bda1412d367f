"""Defects a review of the objects and the control plane found (OBJ-2, EV-3, AL-6), each as what a
user relies on: an idempotency key answers only its own request; an event is delivered after an
outage longer than the alarm's retries; daily maintenance survives the control database being away.
Outages are real: the control database is closed under the running node and opened again."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.control.database import MIGRATIONS, ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.control import EventIndexRow, Identity, Tenant
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.mailbox import MailboxStatus
from mailbox_actors.wire.quota import QuotaInit, QuotaRelease, QuotaReserve, QuotaUsage

DAY = 86_400_000


async def alice(rt: TestRuntime) -> tuple[ControlDb, Tenant, Identity]:
    """The control database, a tenant and its identity "alice", her identity.created delivered."""
    db = rt.node.control_db
    assert db is not None
    tenant = await db.create_tenant("acme")
    ident = await create_identity(db, rt.node, tenant.id, "alice")
    await rt.run_until_idle()
    return db, tenant, ident


def index_row(event_id: str) -> EventIndexRow:
    return EventIndexRow(event_id, "ten_1", None, "identity_mailbox", "a" * 64, 1, "t.x", 0)


@pytest.mark.anyio
async def test_a_reserve_replayed_with_another_count_is_a_conflict(tmp_path: Path) -> None:
    """OBJ-2: a replayed idempotency key answers its first request only; with another count it is
    a conflict, and nothing more is counted."""
    async with TestRuntime(tmp_path) as rt:
        q = rt.id_from_name("tenant_quota", "t1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=100, per_day=1000), tenant_id="t1")
        first = await rt.call("tenant_quota", q, QuotaReserve(key="k", count=1), tenant_id="t1")
        assert await rt.call("tenant_quota", q, QuotaReserve(key="k", count=1),
                             tenant_id="t1") == first
        with pytest.raises(MailboxActorsError) as info:
            await rt.call("tenant_quota", q, QuotaReserve(key="k", count=50), tenant_id="t1")
        assert info.value.code is ErrorCode.CONFLICT
        assert (await rt.call("tenant_quota", q, QuotaUsage(), tenant_id="t1"))["minute_used"] == 1


@pytest.mark.anyio
async def test_a_reserve_replayed_after_its_release_is_a_conflict(tmp_path: Path) -> None:
    """OBJ-2: once released, a key's reservation is not reported granted again (it is not
    counted any more): the replay is a conflict, and a new key is counted as usual."""
    async with TestRuntime(tmp_path) as rt:
        q = rt.id_from_name("tenant_quota", "t1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=1, per_day=1000), tenant_id="t1")
        r = await rt.call("tenant_quota", q, QuotaReserve(key="k"), tenant_id="t1")
        await rt.call("tenant_quota", q, QuotaRelease(reservation_id=r["reservation_id"]),
                      tenant_id="t1")
        with pytest.raises(MailboxActorsError) as info:
            await rt.call("tenant_quota", q, QuotaReserve(key="k"), tenant_id="t1")
        assert info.value.code is ErrorCode.CONFLICT
        assert (await rt.call("tenant_quota", q, QuotaReserve(key="k2"), tenant_id="t1"))["granted"]


@pytest.mark.anyio
async def test_an_event_is_delivered_after_an_outage_longer_than_the_alarm_retries(
        tmp_path: Path) -> None:
    """EV-3: the control database is away for five minutes (the outbox alarm's retries give up
    after about two); once it is back, the event is indexed all the same: never lost."""
    async with TestRuntime(tmp_path, control=True) as rt:
        db, tenant, ident = await alice(rt)
        await db.close()
        await rt.call("identity_mailbox", ident.mailbox_id, _emit("identity.updated"),
                      tenant_id=tenant.id, identity_id=ident.id)
        await rt.advance(300_000)
        await db.open()
        await rt.advance(120_000)
        assert [r.type for r in await db.events(tenant.id)] == ["identity.created",
                                                                 "identity.updated"]


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


def _emit(type_: str) -> object:
    from mailbox_actors.wire.events import EmitEvent
    return EmitEvent(type=type_)


@pytest.mark.anyio
async def test_creating_an_identity_with_an_erased_ones_name_is_a_conflict(tmp_path: Path) -> None:
    """Q-3, OBJ-1: an erased identity's name is not handed back as if created: conflict."""
    async with TestRuntime(tmp_path, control=True) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        ident = await create_identity(db, rt.node, tenant.id, "alice")
        await db.set_identity_status(ident.id, "erased")
        with pytest.raises(MailboxActorsError) as info:
            await create_identity(db, rt.node, tenant.id, "alice")
        assert info.value.code is ErrorCode.CONFLICT


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["10.0.0.1", "a.b", "example.123", "example.com"])
async def test_the_control_database_stores_exactly_the_domains_a_monitor_accepts(
        tmp_path: Path, name: str) -> None:
    """Q-3, OBJ-3: a domain the control database stores is one DomainMonitor's init accepts, and
    the other way round: no domain recorded that no monitor can watch."""
    from mailbox_actors.wire.domain import DomainInit

    async with TestRuntime(tmp_path, control=True) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        try:
            await db.create_domain(tenant.id, name, "c" * 64)
            stored = True
        except MailboxActorsError:
            stored = False
        try:
            await rt.call("domain_monitor", rt.id_from_name("domain_monitor", name),
                          DomainInit(domain=name), tenant_id=tenant.id)
            watched = True
        except MailboxActorsError:
            watched = False
        assert stored == watched == (name == "example.com")


@pytest.mark.anyio
async def test_paging_the_event_index_never_misses_an_event_indexed_late(tmp_path: Path) -> None:
    """Q-3, EV-2: an event whose dispatch was retried is indexed after newer ones; a consumer
    paging with after_event_id still gets it on its next page."""
    clock = FakeClock()
    async with ControlDb(tmp_path / "c.sqlite", clock=clock, ids=Ids(clock, SeededRng(1))) as db:
        await db.index_events([index_row("evt_2"), index_row("evt_3")])
        page = await db.events("ten_1")
        await db.index_events([index_row("evt_1")])  # older id, indexed late
        later = await db.events("ten_1", after_event_id=page[-1].event_id)
    assert [r.event_id for r in page + later] == ["evt_2", "evt_3", "evt_1"]


@pytest.mark.anyio
async def test_an_older_control_database_keeps_its_events_when_upgraded(tmp_path: Path) -> None:
    """Q-3: a file at schema version 1 (events paged by id) is upgraded with every event kept,
    in id order, and new events come after them."""
    clock = FakeClock()
    path = tmp_path / "c.sqlite"
    async with ControlDb(path, clock=clock, ids=Ids(clock, SeededRng(1)),
                         migrations=MIGRATIONS[:1]) as db:
        await db.index_events([index_row("evt_3"), index_row("evt_1"), index_row("evt_2")])
    async with ControlDb(path, clock=clock, ids=Ids(clock, SeededRng(1))) as db:
        assert await db.schema_version() == len(MIGRATIONS)
        await db.index_events([index_row("evt_0")])
        assert [r.event_id for r in await db.events("ten_1")] == ["evt_1", "evt_2", "evt_3",
                                                                  "evt_0"]


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
