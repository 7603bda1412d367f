"""The shared state on PostgreSQL against the SQLite files, in one run (CL-7; issue 23): events end
to end per second and commit-to-webhook p99 through a cluster whose control data and queues are in
PostgreSQL, beside the same figure through a cluster on the SQLite files; and cluster RPC with the
control data on PostgreSQL beside SQLite (the RPC path must not touch the shared store per call).

The server is this machine's own PostgreSQL binaries, started by the bench for the group over
loopback and stopped by pid (``platform.postgres.local_server``); each cluster gets a new database.
The event phases are those of the events group (``event_figures.event_side``), one cluster at a
time in the order SQLite, PostgreSQL, PostgreSQL, SQLite; the RPC sides (``tenant_quota.usage``
through the client, routed straight to owners) run in interleaved rounds with both clusters up.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import anyio

from mailbox_actors.bench.event_figures import EventRun, event_plan, event_round, event_side
from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median
from mailbox_actors.bench.http_figures import (
    _measured,
    _rounds,
    http_plan,
    init_quota_tenants,
    quota_caller,
)
from mailbox_actors.bench.servers import free_port_block, start_cluster, stop_spawned
from mailbox_actors.rpc import Client

__all__ = ["POSTGRES_FIGURES", "postgres_figures"]

POSTGRES_FIGURES = ("pg_events_per_s", "pg_event_latency_p99_ms", "pg_cluster_rpc_calls_per_s",
                    "pg_sqlite_events_per_s", "pg_sqlite_cluster_rpc_calls_per_s")
_EVENTS = frozenset(POSTGRES_FIGURES[:2] + POSTGRES_FIGURES[3:4])
_RPC = frozenset(POSTGRES_FIGURES[2:3] + POSTGRES_FIGURES[4:5])
_ROUNDS = 4  # interleaved RPC rounds per backend at least: the machine's load drifts


async def postgres_figures(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                           errors: list[str]) -> list[Figure]:
    from mailbox_actors.platform.postgres.local_server import LocalPostgres, postgres_binaries

    bindir, why = postgres_binaries()
    if bindir is None:
        raise RuntimeError(why)
    server = await anyio.to_thread.run_sync(LocalPostgres, bindir, free_port_block(1))
    out: list[Figure] = []
    try:
        await anyio.to_thread.run_sync(server.start)
        progress.say(f"postgres: PostgreSQL {bindir.parent.name} on 127.0.0.1:{server.port} "
                     f"(pid {server.proc.pid if server.proc else '?'}), over loopback")
        if want & _EVENTS:
            out += await _events(work, sizes, progress, errors, server.new_database)
        if want & _RPC:
            out += await _rpc(work, sizes, progress, errors, server.new_database("bench_rpc"))
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(server.remove)
    return out


async def _events(work: Path, sizes: Sizes, progress: Progress, errors: list[str],
                  new_database: Callable[[str], str]) -> list[Figure]:
    """One cluster at a time (an idle cluster beside the measured one is not idle: its SQLite
    consumers poll), in the order SQLite, PostgreSQL, PostgreSQL, SQLite, so a drift of the
    machine's load over the group falls on both alike."""
    plan = event_plan(sizes)
    runs: dict[str, EventRun] = {}
    for k, backend in enumerate(("sqlite", "postgres", "postgres", "sqlite")):
        dsn = None
        if backend == "postgres":
            dsn = await anyio.to_thread.run_sync(new_database, f"bench_events_{k}")
        label = f"events {backend}"
        async with event_side(work / f"{backend}-{k}", plan, progress, errors, postgres=dsn,
                              label=label) as side:
            for r in range(plan.rounds):
                if not await event_round(side, plan, progress, errors, r):
                    break
        run = runs.setdefault(backend, side.run)
        if run is not side.run:
            run.flat += side.run.flat
            run.paced += side.run.paced
            run.rates += side.run.rates
    return _event_figures(plan.callers, plan.drive_events, runs["sqlite"], runs["postgres"])


def _event_figures(callers: int, drive: int, lite: EventRun, pg: EventRun) -> list[Figure]:
    how = (f"identity_mailbox.emit_event, {callers} callers back to back for {drive:,} calls, to "
           f"webhooks received by a process of its own (the events group's phases); median of "
           f"{len(pg.flat)} round(s) each, one cluster at a time in the order SQLite, PostgreSQL, "
           f"PostgreSQL, SQLite")
    events = figure("pg_events_per_s", pg.events_per_s, "events/s",
                    goal=Goal("ratio_at_least", 0.5), limit=lite.events_per_s,
                    note=f"{pg.where}; {how}; limit = pg_sqlite_events_per_s, measured in this "
                         f"run")
    events.target = ">= 0.5 of limit (the same figure on SQLite)"
    p99 = figure("pg_event_latency_p99_ms", pg.p99_ms if pg.paced else math.nan, "ms",
                 goal=Goal("below", 100),
                 note=(f"commit (the emit call's return) to the receiver's receipt, paced at half "
                       f"the delivered rate ({', '.join(f'{r:,.0f}' for r in pg.rates)}/s); "
                       f"{pg.where}; on SQLite in the same run: p99 {lite.p99_ms:.1f} ms"))
    ref = figure("pg_sqlite_events_per_s", lite.events_per_s, "events/s",
                 note=f"{lite.where}; {how}; p99 {lite.p99_ms:.1f} ms")
    ref.target = "reference (the limit of pg_events_per_s)"
    return [events, p99, ref]


async def _rpc(work: Path, sizes: Sizes, progress: Progress, errors: list[str], dsn: str
               ) -> list[Figure]:
    plan = http_plan(sizes)
    plan = dataclasses.replace(plan, rounds=max(plan.rounds, 2 * _ROUNDS - 1))
    lite = await start_cluster(work / "rpc-sqlite", plan.cluster_nodes)
    pg = None
    try:
        pg = await start_cluster(work / "rpc-postgres", plan.cluster_nodes,
                                 env={"MAILBOX_ACTORS_POSTGRES": dsn})
        progress.say(f"postgres: cluster RPC, {plan.rounds} interleaved rounds of "
                     f"{plan.seconds:g} s per side, {plan.concurrency} callers")
        async with Client.from_data_dir(lite.data) as c_lite, \
                Client.from_data_dir(pg.data) as c_pg:
            sides = {}
            for name, client in (("sqlite", c_lite), ("postgres", c_pg)):
                oids, tenants = await init_quota_tenants(client, plan.concurrency, f"pg-{name}")
                sides[name] = _measured(quota_caller(client, oids, tenants, "usage"), plan)
            got = await _rounds(sides, plan, "postgres cluster rpc", progress)
    finally:
        with anyio.CancelScope(shield=True):
            errors.extend(await stop_spawned(lite))
            if pg is not None:
                errors.extend(await stop_spawned(pg))
    on_lite = median([r["calls_per_s"] for r in got["sqlite"]])
    on_pg = median([r["calls_per_s"] for r in got["postgres"]])
    where = (f"tenant_quota.usage through mailbox_actors.rpc.Client to a {plan.cluster_nodes}-node "
             f"local cluster, routed straight to owners, {plan.concurrency} callers; median of "
             f"{plan.rounds} rounds of {plan.seconds:g} s, interleaved with the other backend's "
             f"cluster")
    f = figure("pg_cluster_rpc_calls_per_s", on_pg, "calls/s", goal=Goal("ratio_at_least", 0.9),
               limit=on_lite, note=f"{where}; control data and queues on PostgreSQL; limit = "
                                   f"pg_sqlite_cluster_rpc_calls_per_s")
    f.target = ">= 0.9 of limit (the same calls with the SQLite files)"
    ref = figure("pg_sqlite_cluster_rpc_calls_per_s", on_lite, "calls/s",
                 note=f"{where}; control data and queues in the SQLite files")
    ref.target = "reference (the limit of pg_cluster_rpc_calls_per_s)"
    return [f, ref]
