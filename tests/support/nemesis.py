"""The fault test's faults (CL-16), one at a time from a seeded schedule.

A schedule holds every kind once, in an order and on machines its seed picks: SIGKILL (the
machine is started again after the hold), SIGSTOP for twice the lease TTL then SIGCONT, a machine
cut off (link down), two machines partitioned from each other with PostgreSQL reachable
(blackhole routes), a PostgreSQL restart, and one machine cut off from PostgreSQL alone while
clients still reach it (a blackhole route to the server). Each fault is held, healed, and followed by a quiet
gap so the cluster settles before the next; the whole schedule is bounded by its own arithmetic,
not by waiting for anything. The runner writes each fault's start and end into the history
(``type: nemesis``), which the checker skips and a reader of a failed run needs.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

__all__ = ["KINDS", "Fault", "Machines", "Nemesis", "schedule"]

KINDS = ("sigkill", "sigstop", "cut", "partition", "pg_restart", "pg_cut")
# What each kind proves, for the history and the docstrings of the tests that run them.
PROVES = {
    "sigkill": "CL-9 CL-13 CL-14 (a dead machine: a new epoch on restart; shared: taken over)",
    "sigstop": "CL-10 CL-11 (a paused holder past its deadline must not write when it resumes)",
    "cut": "CL-10 CL-17 (a cut-off holder stops at its deadline; nobody serves twice)",
    "partition": "CL-12 (forwarding between two machines fails; PostgreSQL still decides)",
    "pg_restart": "CL-17 (holders serve to their deadline, no slot moves, service resumes)",
    "pg_cut": "CL-10 CL-17 (a holder that lost PostgreSQL alone stops at its deadline while "
              "clients still reach it; under shared another machine takes over)",
}


@dataclass(frozen=True)
class Fault:
    kind: str
    machines: tuple[str, ...]
    hold_s: float
    gap_s: float  # quiet time after the heal, before the next fault


def schedule(seed: int, machines: Sequence[str], ttl_s: float) -> list[Fault]:
    """Every kind once, in a seeded order on seeded machines; each held twice the TTL (SIGSTOP:
    exactly twice the TTL, as CL-16 asks) and followed by a gap of twice the TTL."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    rng.shuffle(kinds)
    out = []
    for kind in kinds:
        if kind == "partition":
            targets = tuple(sorted(rng.sample(list(machines), 2)))
        elif kind == "pg_restart":
            targets = ()
        else:
            targets = (rng.choice(list(machines)),)
        out.append(Fault(kind, targets, hold_s=2 * ttl_s, gap_s=2 * ttl_s))
    return out


def length_s(faults: Sequence[Fault]) -> float:
    return sum(f.hold_s + f.gap_s for f in faults)


class Machines(Protocol):
    """What the nemesis does to the cluster (the test's harness)."""

    def signal(self, machine: str, signum: int) -> None: ...

    async def start(self, machine: str) -> None: ...

    def cut(self, machine: str) -> None: ...

    def mend(self, machine: str) -> None: ...

    def partition(self, a: str, b: str) -> None: ...

    def join(self, a: str, b: str) -> None: ...

    def pg_stop(self) -> None: ...

    def pg_start(self) -> None: ...

    def cut_from_pg(self, machine: str) -> None: ...

    def mend_pg(self, machine: str) -> None: ...


class Nemesis:
    """Runs a schedule. ``observe`` (optional) returns what the cluster says of itself (its slot
    map); it is recorded (``type: observed``) before each fault and after each quiet gap, so a
    test can compare the two sides of one fault (CL-17: no slot changes hands)."""

    def __init__(self, target: Machines, record: Callable[..., None],
                 sleep: Callable[[float], Awaitable[Any]] = anyio.sleep,
                 observe: Callable[[], Awaitable[Any]] | None = None) -> None:
        self.target = target
        self.record = record
        self.sleep = sleep
        self.observe = observe

    async def _observed(self, fault: Fault, when: str) -> None:
        if self.observe is not None:
            self.record(type="observed", fault=fault.kind, when=when, state=await self.observe())

    async def run(self, faults: Sequence[Fault]) -> None:
        for fault in faults:
            await self.one(fault)

    async def one(self, fault: Fault) -> None:
        t, ms = self.target, fault.machines
        await self._observed(fault, "before")
        self.record(type="nemesis", phase="start", fault=fault.kind, machines=list(ms),
                    proves=PROVES[fault.kind])
        match fault.kind:
            case "sigkill":
                t.signal(ms[0], signal.SIGKILL)
            case "sigstop":
                t.signal(ms[0], signal.SIGSTOP)
            case "cut":
                t.cut(ms[0])
            case "partition":
                t.partition(ms[0], ms[1])
            case "pg_restart":
                t.pg_stop()
            case "pg_cut":
                t.cut_from_pg(ms[0])
        await self.sleep(fault.hold_s)  # the fault lasts this long in real time (leases run)
        match fault.kind:
            case "sigkill":
                await t.start(ms[0])
            case "sigstop":
                t.signal(ms[0], signal.SIGCONT)
            case "cut":
                t.mend(ms[0])
            case "partition":
                t.join(ms[0], ms[1])
            case "pg_restart":
                t.pg_start()
            case "pg_cut":
                t.mend_pg(ms[0])
        self.record(type="nemesis", phase="end", fault=fault.kind, machines=list(ms))
        await self.sleep(fault.gap_s)
        await self._observed(fault, "after")
