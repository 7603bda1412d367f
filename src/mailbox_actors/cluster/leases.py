"""Leases as one machine keeps them (CL-9, CL-10, CL-17): which slots it holds, at which epoch,
and until when it may serve each, by its own monotonic clock.

A lease's deadline is the moment this machine *sent* its last successful take or renewal plus the
TTL: the database set the expiry later than that, by its own clock, so the machine stops serving
before anyone else may take the slot, whatever either wall clock does. With PostgreSQL
unreachable nothing is renewed, the deadlines pass and the slots answer ``unavailable``; nobody
else can take them either (that needs the database); when it answers again, the renewal at the
same epoch succeeds and service resumes. A renewal that comes back without a slot means the lease
was lost (taken over): the machine drains that slot.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from mailbox_actors.cluster.lease_table import LeaseTable, SlotRow, TableUnreachable

__all__ = ["LeaseKeeper", "SlotLease", "handed_back", "wanted_slots"]

Monotonic = Callable[[], float]
T = TypeVar("T")


class SlotLease:
    """One held slot: its epoch and monotonic deadline (``EpochFence``'s ``LeaseView``)."""

    __slots__ = ("_monotonic", "deadline", "epoch", "lost", "slot")

    def __init__(self, slot: int, epoch: int, deadline: float, monotonic: Monotonic) -> None:
        self.slot = slot
        self.epoch = epoch
        self.deadline = deadline
        self.lost = False
        self._monotonic = monotonic

    def serving(self) -> bool:
        return not self.lost and self._monotonic() < self.deadline

    def overdue_s(self) -> float:
        """How long ago the deadline passed (negative: still ahead)."""
        return self._monotonic() - self.deadline


class LeaseKeeper:
    """Takes, renews and leaves one machine's leases; every call bounded by the renewal period."""

    def __init__(self, table: LeaseTable, machine: str, *, ttl_s: float, renew_s: float,
                 monotonic: Monotonic = time.monotonic) -> None:
        self.table = table
        self.machine = machine
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self.monotonic = monotonic
        self.held: dict[int, SlotLease] = {}

    async def renew(self) -> set[int]:
        """Renew every held lease in one statement; returns the slots found lost (they leave
        ``held``). Raises TableUnreachable (nothing changes: the deadlines run on)."""
        if not self.held:
            await self._bounded(self.table.renew(self.machine, [], self.ttl_s))
            return set()
        sent = self.monotonic()
        pairs = [(s, lease.epoch) for s, lease in self.held.items()]
        renewed = await self._bounded(self.table.renew(self.machine, pairs, self.ttl_s))
        lost = set()
        for slot, lease in list(self.held.items()):
            if slot in renewed:
                lease.deadline = sent + self.ttl_s
            else:
                lease.lost = True
                lost.add(slot)
                del self.held[slot]
        return lost

    async def take(self, slot: int) -> SlotLease | None:
        """Take ``slot`` (a new epoch), or None when another machine holds it."""
        sent = self.monotonic()
        epoch = await self._bounded(self.table.take(slot, self.machine, self.ttl_s))
        if epoch is None:
            return None
        lease = self.held[slot] = SlotLease(slot, epoch, sent + self.ttl_s, self.monotonic)
        return lease

    async def leave(self, lease: SlotLease) -> None:
        """Give the slot up (after draining it); it stops serving at once."""
        lease.lost = True
        self.held.pop(lease.slot, None)
        try:
            await self._bounded(self.table.leave(lease.slot, self.machine, lease.epoch))
        except TableUnreachable:
            pass  # it expires by itself after the TTL

    async def _bounded(self, call: Awaitable[T]) -> T:
        """A call to the database that gives up after the renewal period (a cut-off connection
        would otherwise wait for TCP to notice)."""
        try:
            with anyio.fail_after(self.renew_s):
                return await call
        except TimeoutError:
            await self.table.drop()
            raise TableUnreachable("timeout") from None


def wanted_slots(machine: str, policy: str, slots: list[SlotRow],
                 machines: dict[str, tuple[bool, bool]], held: set[int]) -> list[int]:
    """The slots ``machine`` should try to take now: its home slots (``local`` and ``shared``);
    under ``shared`` also those nobody serves whose home machine is dead or draining (CL-13).
    A machine that is draining takes none."""
    if machines.get(machine, (True, False))[1]:
        return []
    out = []
    for row in slots:
        if row.slot in held:
            continue
        if row.home == machine:
            if not (row.live and row.holder not in (None, machine)) or policy == "local":
                out.append(row.slot)
            continue
        if policy != "shared" or (row.live and row.holder is not None):
            continue
        home_alive, home_draining = machines.get(row.home, (False, False))
        if not home_alive or home_draining:
            out.append(row.slot)
    return out


def handed_back(machine: str, policy: str, slots: list[SlotRow],
                machines: dict[str, tuple[bool, bool]], held: set[int]) -> list[int]:
    """Held slots ``machine`` should give back: under ``shared``, another machine's home slots
    once that machine is alive and not draining (it takes them when they are left)."""
    if policy != "shared":
        return []
    out = []
    for row in slots:
        if row.slot in held and row.home != machine:
            alive, draining = machines.get(row.home, (False, False))
            if alive and not draining:
                out.append(row.slot)
    return out
