"""The event figures (PERF; EV-1..EV-5, Q-4): events/s from a state change to a webhook receiver,
and the latency from the change's commit to the receipt, beside the durable state changes/s of the
runtime figure measured in the same run.

The node side is a real local cluster started by the bench (``mailbox-actors cluster``; one
``serve`` process when the plan says so). A tenant's webhook points at a receiver in a process of
its own, as a user's endpoint is (``webhook_receiver``: it notes the arrival time of each event id,
checks the signature and answers 200 at once; the bench's callers do not share its loop). State
changes are ``identity_mailbox.emit_event`` calls through the project's client, one caller per
identity; each event carries ``data.n``, and its commit time is the moment the call returns. The
path measured is the whole outbox: the change's transaction writes the event, the outbox alarm
indexes it in the control database and queues it, a webhook consumer claims it and POSTs it,
signed.

Two phases per round: a throughput phase (every caller back to back for a while; events/s = the
events received / (last receipt - first call), so a backlog drained late counts against it), then a
latency phase paced at half the delivered rate just measured, so the latency is that of a pipeline
that keeps up (a saturated pipeline's latency only says how long the run was; it is given in the
note). Every figure is a median of rounds.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median, percentile
from mailbox_actors.bench.runtime_figures import state_changes
from mailbox_actors.bench.servers import Spawned, start_cluster, start_node, stop_spawned
from mailbox_actors.bench.webhook_receiver import EVENT_TYPE, SECRET, ReceiverProcess
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.wire.control import Identity
from mailbox_actors.wire.events import EmitEvent

__all__ = [
    "EVENT_FIGURES",
    "EVENT_TYPE",
    "EventPlan",
    "EventRun",
    "EventSide",
    "event_figures",
    "event_plan",
    "event_round",
    "event_side",
    "measure_events",
]

EVENT_FIGURES = ("events_per_s", "event_latency_p50_ms", "event_latency_p99_ms",
                 "event_emit_calls_per_s", "event_runtime_state_changes_per_s")


@dataclass(frozen=True)
class EventPlan:
    rounds: int
    drive_events: int  # the throughput phase: every caller back to back until this many committed
    latency_s: float  # the paced phase
    callers: int  # one identity each
    drain_s: float  # how long to wait for the last events of a phase
    nodes: int = 3  # 1: one `serve` process instead of a cluster
    state_rounds: int = 5  # the runtime figure's small run, for the limit
    state_calls: int = 3_000
    max_paced_rate: float = 2_000.0


_PLANS = {
    "full": EventPlan(rounds=3, drive_events=15_000, latency_s=5.0, callers=32, drain_s=120.0),
    "quick": EventPlan(rounds=2, drive_events=4_000, latency_s=2.5, callers=32, drain_s=60.0),
    "tiny": EventPlan(rounds=1, drive_events=150, latency_s=0.4, callers=4, drain_s=20.0,
                      state_rounds=2, state_calls=30),
}


def event_plan(sizes: Sizes) -> EventPlan:
    """The event sizes for a run: ``sizes.name`` picks them (unknown names get the quick ones)."""
    return _PLANS.get(sizes.name, _PLANS["quick"])


# ---- the phases ----------------------------------------------------------------------------


@dataclass
class _Phase:
    committed: int  # calls that returned ok
    failed: int  # calls that raised
    received: int  # of the committed, events received
    call_s: float  # first call to last return
    span_s: float  # first call to last receipt
    latencies_ms: list[float]

    @property
    def calls_per_s(self) -> float:
        return self.committed / self.call_s if self.call_s > 0 else math.nan

    @property
    def events_per_s(self) -> float:
        return self.received / self.span_s if self.span_s > 0 else math.nan


class _Driver:
    def __init__(self, client: Client, idents: Sequence[Identity], rx: ReceiverProcess,
                 drain_s: float, progress: Progress) -> None:
        self.progress = progress
        self.client = client
        self.idents = idents
        self.rx = rx
        self.drain_s = drain_s
        self.seq = itertools.count(1)

    async def _emit(self, ident: Identity, n: int, commits: dict[int, float]) -> bool:
        try:
            await self.client.call("identity_mailbox", ident.mailbox_id,
                                   EmitEvent(type=EVENT_TYPE, data={"n": n}),
                                   tenant_id=ident.tenant_id, identity_id=ident.id)
        except RpcError:
            return False
        commits[n] = time.perf_counter()
        return True

    async def _finish(self, t0: float, commits: dict[int, float], failed: int) -> _Phase:
        t1 = max(commits.values(), default=t0)
        give_up = time.perf_counter() + self.drain_s
        while not await self.rx.wait_for(commits, min(1.0, give_up - time.perf_counter())):
            if time.perf_counter() >= give_up:
                break
            self.progress.tick("  events: {:,} of {:,} received", sum(
                n in self.rx.by_n for n in commits), len(commits))
        got = {n: self.rx.by_n[n] for n in commits if n in self.rx.by_n}
        return _Phase(committed=len(commits), failed=failed, received=len(got), call_s=t1 - t0,
                      span_s=max(got.values(), default=t0) - t0,
                      latencies_ms=[(t - commits[n]) * 1e3 for n, t in got.items()])

    async def flat_out(self, count: int) -> _Phase:
        """Every caller (one identity each) back to back until ``count`` calls were made, then
        the drain."""
        commits: dict[int, float] = {}
        failed = 0
        left = count
        t0 = time.perf_counter()

        async def caller(ident: Identity) -> None:
            nonlocal failed, left
            while left > 0:
                left -= 1
                if not await self._emit(ident, next(self.seq), commits):
                    failed += 1

        async with anyio.create_task_group() as tg:
            for ident in self.idents:
                tg.start_soon(caller, ident)
        return await self._finish(t0, commits, failed)

    async def paced(self, rate: float, seconds: float) -> _Phase:
        """One call every ``1/rate`` s, the identities in turn, for ``seconds``, then the drain."""
        commits: dict[int, float] = {}
        failed = 0
        t0 = time.perf_counter()

        async def one(ident: Identity, n: int) -> None:
            nonlocal failed
            if not await self._emit(ident, n, commits):
                failed += 1

        async with anyio.create_task_group() as tg:
            for k in range(max(1, round(rate * seconds))):
                delay = t0 + k / rate - time.perf_counter()
                if delay > 0:
                    await anyio.sleep(delay)
                tg.start_soon(one, self.idents[k % len(self.idents)], next(self.seq))
        return await self._finish(t0, commits, failed)


# ---- the group -----------------------------------------------------------------------------


async def event_figures(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                        errors: list[str]) -> list[Figure]:
    """The figures of ``EVENT_FIGURES``: the runtime's state changes/s first (a small run of the
    runtime figure, before any server starts), then the rounds through the cluster."""
    plan = event_plan(sizes)
    small = msgspec.structs.replace(sizes, rounds=min(sizes.rounds, plan.state_rounds),
                                    state_calls=min(sizes.state_calls, plan.state_calls))
    progress.say(f"events: the runtime figure's state changes/s on a small run ({small.rounds} "
                 f"rounds of {small.state_calls}), the limit of events/s")
    runtime = (await state_changes(work / "runtime", small, progress))[0]
    run = await measure_events(work, plan, progress, errors)
    return _figures(plan, runtime, run.flat, run.paced, run.rates, run.rx, run.where)


@dataclass
class EventRun:
    """What ``measure_events`` measured: the throughput and paced phases of each round."""

    flat: list[_Phase]
    paced: list[_Phase]
    rates: list[float]
    rx: ReceiverProcess
    where: str

    @property
    def events_per_s(self) -> float:
        return median([f.events_per_s for f in self.flat])

    @property
    def p99_ms(self) -> float:
        return median([percentile(p.latencies_ms, 99) for p in self.paced])


@dataclass
class EventSide:
    """A cluster set up for the event phases (``event_side``) and what its rounds measured."""

    driver: _Driver
    run: EventRun
    label: str


@asynccontextmanager
async def event_side(work: Path, plan: EventPlan, progress: Progress, errors: list[str], *,
                     postgres: str | None = None, label: str = "events"
                     ) -> AsyncIterator[EventSide]:
    """A cluster started in ``work`` (its control data and queues in PostgreSQL when
    ``postgres``, a DSN, is given: CL-7; else in its SQLite files), a tenant whose webhook is a
    receiver process (``ReceiverProcess``), ``plan.callers`` identities, a warm-up; stopped on exit."""
    rx = await ReceiverProcess.start()
    sp: Spawned | None = None
    db: ControlDb | None = None
    backend = "PostgreSQL" if postgres else "SQLite"
    try:
        env = None if postgres is None else {"MAILBOX_ACTORS_POSTGRES": postgres}
        if plan.nodes > 1:
            sp = await start_cluster(work / "cluster", plan.nodes, env=env)
            where = f"a {plan.nodes}-node local cluster, control data and queues on {backend}"
        else:
            sp = await start_node(work / "node")
            where = "one node"
        clock = SystemClock()
        if postgres is None:
            db = ControlDb(sp.data / "control.sqlite", clock=clock, ids=Ids(clock, SystemRng()))
        else:
            from mailbox_actors.platform.control.postgres import control_on
            from mailbox_actors.platform.postgres.database import PgDatabase

            db = control_on(PgDatabase(postgres, max_size=2), clock=clock,
                            ids=Ids(clock, SystemRng()))
        await db.open()
        tenant = await db.create_tenant("bench-events", webhook_url=rx.url, webhook_secret=SECRET)
        async with (Client.from_data_dir(sp.data) if plan.nodes > 1
                    else Client(sp.urls[0], sp.token)) as client:
            progress.say(f"{label}: {where} (pid {sp.pid}); creating {plan.callers} identities of "
                         f"one tenant whose webhook is a receiver process of its own (pid {rx.pid}, "
                     f"port {rx.port})")
            idents = [await create_identity(db, client, tenant.id, f"bench-{i}")
                      for i in range(plan.callers)]
            if not await rx.wait_types("identity.created", len(idents), plan.drain_s):
                raise RuntimeError(f"only {rx.types['identity.created']} of {len(idents)} "
                                   f"identity.created webhooks arrived within {plan.drain_s:g} s")
            driver = _Driver(client, idents, rx, plan.drain_s, progress)
            await driver.flat_out(min(500, plan.drive_events))  # warm-up, untimed
            yield EventSide(driver, EventRun([], [], [], rx, where), label)
    finally:
        with anyio.CancelScope(shield=True):
            if db is not None:
                await db.close()
            if sp is not None:
                errors.extend(await stop_spawned(sp))
            await rx.stop()
    for what, count in (("deliveries with a bad signature", rx.bad_signatures),
                        ("deliveries that were not an event", rx.malformed)):
        if count:
            errors.append(f"{label}: {count} {what}")


async def event_round(side: EventSide, plan: EventPlan, progress: Progress, errors: list[str],
                      r: int) -> bool:
    """One round on ``side``: the throughput phase, then the paced one at half its delivered
    rate. False (said in ``errors``) when events were left undelivered: stop there."""
    run = side.run
    run.flat.append(await side.driver.flat_out(plan.drive_events))
    f = run.flat[-1]
    if f.received < f.committed:  # a backlog left over would spoil the next phase
        errors.append(f"{side.label}: {f.committed - f.received} of {f.committed} events "
                      f"not received within {plan.drain_s:g} s of round {r + 1}; stopped there")
        return False
    run.rates.append(max(10.0, min(plan.max_paced_rate, 0.5 * f.events_per_s)))
    run.paced.append(await side.driver.paced(run.rates[-1], plan.latency_s))
    p = run.paced[-1]
    progress.say(
        f"  {side.label} round {r + 1}/{plan.rounds}: {f.calls_per_s:,.0f} emit calls/s, "
        f"{f.events_per_s:,.0f} events/s delivered ({f.received}/{f.committed}); paced "
        f"at {run.rates[-1]:,.0f}/s: p50 {percentile(p.latencies_ms, 50):.1f} ms, p99 "
        f"{percentile(p.latencies_ms, 99):.1f} ms ({p.received}/{p.committed})")
    return True


async def measure_events(work: Path, plan: EventPlan, progress: Progress, errors: list[str], *,
                         postgres: str | None = None, label: str = "events") -> EventRun:
    """Every round of ``plan`` on one cluster (``event_side``)."""
    async with event_side(work, plan, progress, errors, postgres=postgres, label=label) as side:
        for r in range(plan.rounds):
            if not await event_round(side, plan, progress, errors, r):
                break
    return side.run


def _figures(plan: EventPlan, runtime: Figure, flat: list[_Phase], paced: list[_Phase],
             rates: list[float], rx: ReceiverProcess, where: str) -> list[Figure]:
    eps = median([f.events_per_s for f in flat])
    cps = median([f.calls_per_s for f in flat])
    sc = runtime.value
    lost = sum(x.committed - x.received for x in flat + paced)
    failed = sum(x.failed for x in flat + paced)
    rounds = f"median of {len(flat)} round(s)"
    sat = [lat for f in flat for lat in f.latencies_ms]
    tail = "".join([
        f"; {lost} committed events NOT received within {plan.drain_s:g} s" if lost else "",
        f"; {failed} emit calls FAILED" if failed else "",
        f"; {rx.duplicates} duplicate deliveries (deduplicated on the id)" if rx.duplicates else ""])
    events = figure("events_per_s", eps, "events/s", goal=Goal("ratio_at_least", 0.3), limit=sc,
                    note=(f"identity_mailbox.emit_event through mailbox_actors.rpc.Client to "
                          f"{where}, {plan.callers} callers (one identity each) back to back "
                          f"for {plan.drive_events:,} calls; events/s = events received / (last "
                          f"receipt - first call); webhook receiver in a process of its own answering "
                          f"200 at once; limit = the runtime figure's state changes/s in this run; "
                          f"{eps / cps if cps else math.nan:.2f} of the emit calls/s of the same "
                          f"phases; latency while saturated: p50 {percentile(sat, 50):.0f} ms, "
                          f"p99 {percentile(sat, 99):.0f} ms; {rounds}{tail}"))
    events.target = ">= 0.3 of limit (runtime state changes/s)"
    emits = figure("event_emit_calls_per_s", cps, "calls/s", note=(
        f"the state changes the events came from: emit_event calls/s through the client to "
        f"{where} in the throughput phases; {rounds}"))
    emits.target = "reference (the state changes behind the events)"
    limit = figure("event_runtime_state_changes_per_s", sc, "tx/s", note=(
        f"state_changes_per_s of the runtime figure (tenant_quota.reserve through the in-process "
        f"RPC path), measured by this group on a small run before any server started: "
        f"{runtime.note}"))
    limit.target = "reference (the limit of events_per_s)"
    latency = _latency_figures(plan, paced, rates, rounds) if paced else []
    return [events, *latency, emits, limit]


def _latency_figures(plan: EventPlan, paced: list[_Phase], rates: list[float], rounds: str
                     ) -> list[Figure]:
    lat_note = (f"from the emit_event call's return (its commit) to the receiver's receipt, paced "
                f"at {', '.join(f'{r:,.0f}' for r in rates)}/s (half the delivered rate of the "
                f"phase before; the receiver answers at once) for {plan.latency_s:g} s; {rounds}")
    p50 = median([percentile(p.latencies_ms, 50) for p in paced])
    p99 = median([percentile(p.latencies_ms, 99) for p in paced])
    return [
        Figure(figure="event_latency_p50_ms", value=p50, unit="ms", limit=None, ratio=None,
               target="no target", passed=None, note=lat_note),
        figure("event_latency_p99_ms", p99, "ms", goal=Goal("below", 100), note=lat_note),
    ]

