"""The fault test's schedule and its runner (CL-16): every fault kind once, in a seeded order, held
and healed one at a time, each start and end written to the history."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from nemesis import KINDS, Nemesis, length_s, schedule

MACHINES = ("m1", "m2", "m3")


def test_a_schedule_holds_every_kind_once_in_a_seeded_order() -> None:
    """CL-16: the same seed gives the same schedule; each kind appears once; a partition is of two
    different machines; SIGSTOP lasts twice the TTL; the whole is bounded by its own sum."""
    a, b = schedule(1, MACHINES, ttl_s=3), schedule(1, MACHINES, ttl_s=3)
    assert a == b
    assert sorted(f.kind for f in a) == sorted(KINDS)
    part = next(f for f in a if f.kind == "partition")
    assert len(set(part.machines)) == 2 and set(part.machines) <= set(MACHINES)
    assert next(f for f in a if f.kind == "sigstop").hold_s == 6
    assert next(f for f in a if f.kind == "pg_restart").machines == ()
    assert length_s(a) == len(KINDS) * 12
    orders = {tuple(f.kind for f in schedule(s, MACHINES, ttl_s=3)) for s in range(10)}
    assert len(orders) > 1


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def signal(self, machine: str, signum: int) -> None:
        self.calls.append(("signal", machine, signum))

    async def start(self, machine: str) -> None:
        self.calls.append(("start", machine))

    def cut(self, machine: str) -> None:
        self.calls.append(("cut", machine))

    def mend(self, machine: str) -> None:
        self.calls.append(("mend", machine))

    def partition(self, a: str, b: str) -> None:
        self.calls.append(("partition", a, b))

    def join(self, a: str, b: str) -> None:
        self.calls.append(("join", a, b))

    def pg_stop(self) -> None:
        self.calls.append(("pg_stop",))

    def pg_start(self) -> None:
        self.calls.append(("pg_start",))

    def cut_from_pg(self, machine: str) -> None:
        self.calls.append(("cut_from_pg", machine))

    def mend_pg(self, machine: str) -> None:
        self.calls.append(("mend_pg", machine))

    async def sleep(self, seconds: float) -> None:
        self.calls.append(("sleep", seconds))


@pytest.mark.anyio
async def test_the_runner_makes_and_heals_each_fault_in_turn() -> None:
    """CL-16: each fault is made, held, healed, then a quiet gap; SIGKILL is followed by a new
    start of that machine, SIGSTOP by SIGCONT; the history gets a start and an end per fault."""
    target = Recorder()
    history: list[dict[str, Any]] = []
    faults = schedule(4, MACHINES, ttl_s=1)
    await Nemesis(target, lambda **e: history.append(e), sleep=target.sleep).run(faults)
    heals = {"sigkill": "start", "sigstop": "signal", "cut": "mend", "partition": "join",
             "pg_restart": "pg_start", "pg_cut": "mend_pg"}
    calls = iter(target.calls)
    for f in faults:
        made, held, healed, gap = next(calls), next(calls), next(calls), next(calls)
        assert held == ("sleep", 2) and gap == ("sleep", 2)
        assert healed[0] == heals[f.kind]
        if f.kind == "sigkill":
            assert made == ("signal", f.machines[0], signal.SIGKILL)
        if f.kind == "sigstop":
            assert made == ("signal", f.machines[0], signal.SIGSTOP)
            assert healed == ("signal", f.machines[0], signal.SIGCONT)
        if f.kind == "partition":
            assert made == ("partition", *f.machines) and healed == ("join", *f.machines)
    assert [(e["phase"], e["fault"]) for e in history] == [
        (p, f.kind) for f in faults for p in ("start", "end")]


@pytest.mark.anyio
async def test_the_cluster_is_observed_before_each_fault_and_after_its_gap() -> None:
    """CL-16, CL-17: what the cluster says of itself is recorded on both sides of each fault, so
    a test can tell whether a slot changed hands across a PostgreSQL restart."""
    target = Recorder()
    history: list[dict[str, Any]] = []
    seen = iter(range(100))

    async def observe() -> dict[str, int]:
        target.calls.append(("observe",))
        return {"n": next(seen)}

    faults = schedule(5, MACHINES, ttl_s=1)[:2]
    await Nemesis(target, lambda **e: history.append(e), sleep=target.sleep,
                  observe=observe).run(faults)
    observed = [(e["fault"], e["when"], e["state"]["n"]) for e in history
                if e["type"] == "observed"]
    assert observed == [(faults[0].kind, "before", 0), (faults[0].kind, "after", 1),
                        (faults[1].kind, "before", 2), (faults[1].kind, "after", 3)]
    assert target.calls[0] == ("observe",) and target.calls[5] == ("observe",)
