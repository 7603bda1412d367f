"""TenantQuota (OBJ-2): limits per minute and per day as rolling windows, idempotent reservations,
release, usage, status, and the maintenance alarm that drops windows older than 48 hours. All time
is FakeClock time."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.objects import TenantQuota
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.quota import (
    QuotaInit,
    QuotaRelease,
    QuotaReserve,
    QuotaStatus,
    QuotaUsage,
)

NS = "tenant_quota"
TENANT = "tenant_a"
MINUTE = 60_000
HOUR = 3_600_000
DAY = 24 * HOUR
T0 = 1_767_225_600_000  # a whole hour, as TestRuntime's default start


class Quota:
    """One tenant's quota object, called through the full RPC path."""

    def __init__(self, rt: TestRuntime, tenant: str = TENANT) -> None:
        self.rt = rt
        self.tenant = tenant
        self.id = rt.id_from_name(NS, tenant)

    async def __call__(self, req: Any) -> Any:
        return await self.rt.call(NS, self.id, req, tenant_id=self.tenant)

    async def reserve(self, key: str, count: int = 1) -> Any:
        return await self(QuotaReserve(key=key, count=count))

    async def refused(self, key: str, count: int = 1) -> MailboxActorsError:
        with pytest.raises(MailboxActorsError) as e:
            await self.reserve(key, count)
        return e.value

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        path = self.rt.node.host.path_for(NS, self.id)
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return conn.execute(query).fetchall()


@pytest.mark.anyio
async def test_init_status_and_not_found_before_init(tmp_path: Path) -> None:
    """OBJ-2: before init every op is tenant_not_found; init sets the limits (a repeat may change
    them, the owner stays) and arms the daily maintenance alarm; status reports them."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        q = Quota(rt)
        for req in (QuotaStatus(), QuotaUsage(), QuotaReserve(key="k"), QuotaRelease(
                reservation_id="rsv_x")):
            with pytest.raises(MailboxActorsError) as e:
                await q(req)
            assert e.value.code == "tenant_not_found"
        assert await q(QuotaInit(per_minute=3, per_day=100)) == {"created": True}
        # The alarm is the outbox's (the quota.created event) until it is dispatched.
        assert (await q(QuotaStatus()))["alarm"] == T0
        await rt.run_until_idle()
        assert await q(QuotaStatus()) == {"tenant_id": TENANT, "per_minute": 3, "per_day": 100,
                                          "schema_version": len(TenantQuota.migrations),
                                          "alarm": T0 + DAY}
        assert await q(QuotaInit(per_minute=4, per_day=50)) == {"created": False}
        await rt.run_until_idle()
        status = await q(QuotaStatus())
        assert (status["per_minute"], status["per_day"], status["alarm"]) == (4, 50, T0 + DAY)


@pytest.mark.anyio
async def test_reserve_is_granted_and_idempotent_on_its_key(tmp_path: Path) -> None:
    """OBJ-2: reserve returns {reservation_id, granted: true}; the same key again returns the same
    reservation and consumes nothing more, even after a restart; the same key with another count is
    a conflict (a replay answers only its own request)."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        q = Quota(rt)
        await q(QuotaInit(per_minute=10, per_day=100))
        first = await q.reserve("send-1")
        assert first["granted"] is True and first["reservation_id"].startswith("rsv_")
        assert await q.reserve("send-1") == first
        with pytest.raises(MailboxActorsError) as info:
            await q.reserve("send-1", count=3)
        assert info.value.code is ErrorCode.CONFLICT
        second = await q.reserve("send-2", count=2)
        assert second["reservation_id"] != first["reservation_id"]
        assert await q(QuotaUsage()) == {"minute_used": 3, "minute_limit": 10, "day_used": 3,
                                         "day_limit": 100}
    async with TestRuntime(tmp_path, start_ms=T0 + 1_000) as rt:
        q = Quota(rt)
        assert await q.reserve("send-1") == first
        assert (await q(QuotaUsage()))["minute_used"] == 3


@pytest.mark.anyio
async def test_full_minute_window_is_rate_limited_until_it_rolls(tmp_path: Path) -> None:
    """OBJ-2: when the minute window is full, reserve is rate_limited (retryable) with
    details.retry_after_ms; one ms before that it is still refused, at it the reserve is granted."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        q = Quota(rt)
        await q(QuotaInit(per_minute=3, per_day=1_000))
        await q.reserve("a")
        await rt.advance(10_000)
        await q.reserve("b")
        await rt.advance(10_000)
        await q.reserve("c")
        await rt.advance(10_000)  # T0 + 30 s
        err = await q.refused("d")
        assert err.code == "rate_limited" and err.retryable
        wait = err.details["retry_after_ms"]  # type: ignore[index]
        assert isinstance(wait, int) and 0 < wait <= MINUTE + 1_000
        # "a" (at T0) leaves the window at T0 + 61 s with one-second buckets.
        assert wait == 31_000
        await rt.advance(wait - 1)
        assert (await q.refused("d")).code == "rate_limited"
        await rt.advance(1)
        assert (await q.reserve("d"))["granted"] is True
        assert (await q(QuotaUsage()))["minute_used"] == 3
        # A refused key was not remembered as granted.
        assert (await q.refused("e")).code == "rate_limited"


@pytest.mark.anyio
async def test_per_day_limit(tmp_path: Path) -> None:
    """OBJ-2: the per-day limit refuses with rate_limited even when the minute window has room,
    with a retry_after_ms that leads to a granted reserve."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        q = Quota(rt)
        await q(QuotaInit(per_minute=100, per_day=5))
        await q.reserve("a", count=3)
        await rt.advance(5 * MINUTE)
        await q.reserve("b", count=2)
        await rt.advance(5 * MINUTE)
        usage = await q(QuotaUsage())
        assert (usage["minute_used"], usage["day_used"]) == (0, 5)
        err = await q.refused("c")
        assert err.code == "rate_limited"
        wait = err.details["retry_after_ms"]  # type: ignore[index]
        assert HOUR < wait <= DAY + HOUR
        await rt.advance(wait - 1)
        assert (await q.refused("c")).code == "rate_limited"
        await rt.advance(1)
        assert (await q.reserve("c"))["granted"] is True


@pytest.mark.anyio
async def test_count_over_a_limit_and_partial_fit(tmp_path: Path) -> None:
    """OBJ-2: a count larger than a limit can never fit (invalid_request); a count larger than what
    is left is rate_limited and takes nothing."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        q = Quota(rt)
        await q(QuotaInit(per_minute=5, per_day=8))
        for count in (6, 9):
            with pytest.raises(MailboxActorsError) as e:
                await q.reserve(f"huge{count}", count=count)
            assert e.value.code == "invalid_request"
        await q.reserve("a", count=4)
        assert (await q.refused("b", count=2)).code == "rate_limited"
        assert (await q(QuotaUsage()))["minute_used"] == 4
        assert (await q.reserve("b", count=1))["granted"] is True


@pytest.mark.anyio
async def test_release_gives_capacity_back(tmp_path: Path) -> None:
    """OBJ-2: release of a reservation returns its count to both windows (once); releasing again
    or an unknown reservation returns released: false."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        q = Quota(rt)
        await q(QuotaInit(per_minute=2, per_day=10))
        r1 = (await q.reserve("a", count=2))["reservation_id"]
        assert (await q.refused("b")).code == "rate_limited"
        assert await q(QuotaRelease(reservation_id=r1)) == {"released": True}
        assert await q(QuotaUsage()) == {"minute_used": 0, "minute_limit": 2, "day_used": 0,
                                         "day_limit": 10}
        assert await q(QuotaRelease(reservation_id=r1)) == {"released": False}
        assert await q(QuotaRelease(reservation_id="rsv_unknown")) == {"released": False}
        assert (await q.reserve("b"))["granted"] is True
        assert (await q.reserve("c"))["granted"] is True
        assert (await q.refused("d")).code == "rate_limited"
        assert (await q(QuotaUsage()))["minute_used"] == 2


@pytest.mark.anyio
async def test_release_of_part_of_a_reservation_gives_that_much_back(tmp_path: Path) -> None:
    """OBJ-2: release with a count gives back that many of the reservation (a block reserved
    ahead and not all used), at most what is left of it; release without a count gives back
    the rest; a replay of the reserve answers the same reservation while part of it stands and
    conflict once all of it was given back."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        q = Quota(rt)
        await q(QuotaInit(per_minute=10, per_day=100))
        r1 = (await q.reserve("block", count=5))["reservation_id"]
        assert await q(QuotaRelease(reservation_id=r1, count=2)) == {"released": True}
        assert (await q(QuotaUsage()))["minute_used"] == 3
        assert (await q.reserve("block", count=5))["reservation_id"] == r1
        assert await q(QuotaRelease(reservation_id=r1, count=9)) == {"released": True}
        assert (await q(QuotaUsage()))["minute_used"] == 0
        assert await q(QuotaRelease(reservation_id=r1)) == {"released": False}
        assert (await q.refused("block", count=5)).code == "conflict"


@pytest.mark.anyio
async def test_maintenance_alarm_deletes_windows_older_than_48_hours(tmp_path: Path) -> None:
    """OBJ-2: the daily maintenance alarm deletes rate windows (and idempotency rows) older than
    48 hours, keeps younger ones, and re-arms itself a day later."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        q = Quota(rt)
        await q(QuotaInit(per_minute=10, per_day=100))
        old = await q.reserve("old")
        await rt.advance(47 * HOUR)
        young = await q.reserve("young")
        assert len(q.rows("SELECT * FROM rate_windows")) == 4  # a minute and a day bucket each

        await rt.advance(HOUR)  # T0 + 48 h: maintenance ran at 24 h and 48 h; nothing is older
        assert len(q.rows("SELECT * FROM rate_windows")) == 4
        assert (await q(QuotaStatus()))["alarm"] == T0 + 3 * DAY

        await rt.advance(DAY)  # T0 + 72 h: the windows from T0 are now older than 48 h
        starts = sorted(r[0] for r in q.rows("SELECT start_ms FROM rate_windows"))
        assert starts and all(s >= T0 + 47 * HOUR for s in starts)
        assert len(starts) == 2
        assert q.rows("SELECT key FROM reservations") == [("young",)]
        assert (await q(QuotaStatus()))["alarm"] == T0 + 4 * DAY
        # The idempotency row of "old" is gone, so the key reserves anew; "young" is remembered.
        assert (await q.reserve("old"))["reservation_id"] != old["reservation_id"]
        assert await q.reserve("young") == young


@pytest.mark.anyio
async def test_quotas_of_two_tenants_are_separate_objects(tmp_path: Path) -> None:
    """OBJ-2, RPC-3: each tenant's quota is its own object; one tenant cannot use another's."""
    async with TestRuntime(tmp_path, start_ms=T0) as rt:
        a, b = Quota(rt, "tenant_a"), Quota(rt, "tenant_b")
        await a(QuotaInit(per_minute=1, per_day=1))
        await b(QuotaInit(per_minute=1, per_day=1))
        await a.reserve("k")
        assert (await b.reserve("k"))["granted"] is True
        with pytest.raises(MailboxActorsError) as e:
            await rt.call(NS, a.id, QuotaUsage(), tenant_id="tenant_b")
        assert e.value.code == "internal_error"


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
