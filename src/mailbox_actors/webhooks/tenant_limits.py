"""Per-tenant limits of webhook delivery in one process (Q-4): how many attempts of a tenant run at
once (a slow endpoint keeps its own consumers busy, not everyone's), and one shared, briefly cached
read of the tenant's row for concurrent deliveries (single flight)."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.wire.control import Tenant

__all__ = ["SLOT_WAIT_S", "TENANT_FRESH_MS", "TenantReads", "TenantSlots"]

# A tenant at its in-flight cap waits for a slot (real time) until its oldest attempt in flight
# has run this long, then its message is deferred; a fast endpoint frees one within milliseconds.
SLOT_WAIT_S = 0.25
TENANT_FRESH_MS = 100  # how long a tenant row read for one delivery serves the next ones


class _Slots:
    """A tenant's attempts in flight in this process: when each started (anyio time), and the
    event the attempts waiting for a slot wait on (made by the first of them: a tenant below its
    cap, nearly every delivery, makes none)."""

    __slots__ = ("freed", "started")

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.freed: anyio.Event | None = None


class _TenantRead:
    """One control-database read of a tenant that concurrent deliveries share."""

    __slots__ = ("done", "ok", "tenant")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.ok = False
        self.tenant: Tenant | None = None


class TenantSlots:
    """Attempts in flight per tenant. ``now`` is anyio's time (a test may give its own)."""

    def __init__(self, now: Callable[[], float] = anyio.current_time) -> None:
        self._by_tenant: dict[str, _Slots] = {}
        # How long a tenant's last finished attempt ran, kept only when that was SLOT_WAIT_S or
        # more (a slow or hung endpoint): a faster one is forgotten, as are all at 10,000.
        self._slow_s: dict[str, float] = {}
        self._now = now

    @property
    def tenants_in_flight(self) -> int:
        """Tenants with an attempt in flight (an entry is dropped with its last attempt)."""
        return len(self._by_tenant)

    async def take(self, tenant_id: str, key: str, cap: int | None) -> bool:
        """A slot for one attempt, or False if the tenant stays at its cap (its endpoint is slow)."""
        while True:
            # Looked up afresh after every wait: the last holder may have dropped the entry.
            slots = self._by_tenant.get(tenant_id)
            if slots is None:
                slots = self._by_tenant[tenant_id] = _Slots()
            if cap is None or len(slots.started) < cap:
                break
            wait_s = min(slots.started.values()) + SLOT_WAIT_S - self._now()
            if wait_s <= 0:
                return False
            freed = slots.freed
            if freed is None:
                freed = slots.freed = anyio.Event()
            with anyio.move_on_after(wait_s):
                await freed.wait()
        slots.started[key] = self._now()
        return True

    def busy_s(self, tenant_id: str) -> float:
        """How slow the tenant's endpoint is, as far as this process knows: the longer of how
        long its oldest attempt in flight has run and how long its last finished one ran, when
        that was ``SLOT_WAIT_S`` or more (0 with neither)."""
        slots = self._by_tenant.get(tenant_id)
        oldest_s = 0.0 if slots is None or not slots.started else \
            self._now() - min(slots.started.values())
        return max(0.0, oldest_s, self._slow_s.get(tenant_id, 0.0))

    def free(self, tenant_id: str, key: str) -> None:
        slots = self._by_tenant.get(tenant_id)
        started = None if slots is None else slots.started.pop(key, None)
        if slots is None or started is None:
            return
        ran_s = self._now() - started
        if ran_s < SLOT_WAIT_S:
            self._slow_s.pop(tenant_id, None)
        else:
            if len(self._slow_s) >= 10_000:
                self._slow_s.clear()
            self._slow_s[tenant_id] = ran_s
        freed = slots.freed
        if freed is not None:  # wake every attempt waiting; later ones wait on a new event
            slots.freed = None
            freed.set()
        if not slots.started:
            del self._by_tenant[tenant_id]


class TenantReads:
    """Tenant rows read from the control database, shared and cached briefly."""

    def __init__(self, db: ControlDb, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._cache: dict[str, tuple[int, Tenant | None]] = {}
        self._reads: dict[str, _TenantRead] = {}

    async def get(self, tenant_id: str) -> Tenant | None:
        """The tenant row, read from the control database. Concurrent deliveries for one tenant
        share one read (single flight) and reuse it for ``TENANT_FRESH_MS``, so a busy tenant
        costs one read per wave, not one per event, and a change is seen within that time."""
        while True:
            now = self._clock.now_ms()
            hit = self._cache.get(tenant_id)
            if hit is not None and now - hit[0] <= TENANT_FRESH_MS:
                return hit[1]
            flight = self._reads.get(tenant_id)
            if flight is None:
                break
            # Another delivery is reading it: use its result; if that read failed, loop and
            # read ourselves (never mistake a failed read for "no such tenant").
            await flight.done.wait()
            if flight.ok:
                return flight.tenant
        flight = self._reads[tenant_id] = _TenantRead()
        try:
            flight.tenant = await self._db.get_tenant(tenant_id)
            flight.ok = True
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[tenant_id] = (now, flight.tenant)
            return flight.tenant
        finally:
            del self._reads[tenant_id]
            flight.done.set()
