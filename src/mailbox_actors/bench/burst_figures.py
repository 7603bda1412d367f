"""The burst figures (PERF, section 12): N alarms due at one instant on N open actors.

A maintenance hour, or a node back from a restart, makes many alarms due together on actors that
are open. ``alarm_burst_per_s`` is how fast such a burst fires: N ``BenchTicker``s are opened by a
request each (every one stays open), their alarms set to one instant, and the clock brought to it;
the figure is N over the time from that instant to the last alarm's commit. Its limit,
``raw_burst_tx_per_s``, is raw ``sqlite3`` doing what each alarm must at the least, on open
connections to the same files: one write transaction (the handler's UPDATE and the alarm row's
move, as ``raw_alarm_write``) per connection, one after another on one thread, WAL and
``synchronous=NORMAL`` as the runtime's default. ``alarm_burst_lateness_p99_ms`` is the 99th
percentile of how late each alarm started, over every burst.

The bursts alternate with raw rounds (each side takes the first place in turn), each reports its
median.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import msgspec

from mailbox_actors.bench.actors import BenchTicker, TickInit, ticker_name
from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median, percentile
from mailbox_actors.bench.ticker_figures import NS, TENANT, ShiftedClock, make_population
from mailbox_actors.node import Node
from mailbox_actors.platform.descriptors import raise_nofile_limit
from mailbox_actors.platform.storage.handle import keep_wal_on_close
from mailbox_actors.runtime.settings import RuntimeSettings

__all__ = ["BURST_FIGURES", "burst_figures"]

BURST_FIGURES = ("alarm_burst_per_s", "raw_burst_tx_per_s", "alarm_burst_lateness_p99_ms")
_LEAD_MS = 200  # the clock is brought this long before the instant: the burst starts on a timer
_DAY_MS = 86_400_000


def _raw_burst(paths: list[Path]) -> float:
    """Transactions/s of one write transaction on each of ``paths``' open connections in turn."""
    conns = []
    try:
        for p in paths:
            conn = sqlite3.connect(p, isolation_level=None, check_same_thread=False)
            keep_wal_on_close(conn, p)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("SELECT fired FROM ticks WHERE id = 1").fetchone()  # open, as a read did
            conns.append(conn)
        t = time.perf_counter()
        for conn in conns:
            conn.execute("BEGIN")
            conn.execute("UPDATE ticks SET fired = fired + 1 WHERE id = 1")
            conn.execute("UPDATE _ma_alarm SET at_ms = at_ms + 1 WHERE id = 1")
            conn.execute("COMMIT")
        return len(conns) / (time.perf_counter() - t)
    finally:
        for conn in conns:
            conn.close()


async def _burst(node: Node, clock: ShiftedClock, n: int, at: int,
                 ) -> tuple[float, list[int], int]:
    """Every ticker's alarm set to ``at`` (by a request each, which also opens it), then the
    clock brought to ``_LEAD_MS`` before it; (fired/s, lateness ms, activations meanwhile)."""
    sched = node.scheduler
    assert sched is not None
    for i in range(n):
        await node.call(NS, node.id_from_name(NS, ticker_name(i)), TickInit(alarm_at_ms=at),
                        tenant_id=TENANT)
    if node.host.active_count < n:
        raise RuntimeError(f"only {node.host.active_count} of {n} actors are open")
    lateness: list[int] = []
    sched.lateness_ms = lateness
    fired0, opened0 = sched.fired, node.host.activations
    BenchTicker.last_commit = 0.0
    clock.offset_ms = at - _LEAD_MS - time.time_ns() // 1_000_000
    due = time.perf_counter() + _LEAD_MS / 1000
    stop = due + 60
    while True:  # the burst's end is read off the actors, so this wait only has to be bounded
        if sched.fired - fired0 >= n or time.perf_counter() >= stop:
            break
        await anyio.sleep(0.02)
    sched.lateness_ms = None
    fired = sched.fired - fired0
    if fired < n:
        raise RuntimeError(f"{fired} of {n} alarms fired within 60 s")
    return n / (BenchTicker.last_commit - due), lateness, node.host.activations - opened0


async def burst_figures(work: Path, sizes: Sizes, progress: Progress) -> list[Figure]:
    n, rounds = sizes.burst_actors, max(2, sizes.rounds // 2)
    raise_nofile_limit()  # n open actors hold 3n descriptors
    burst = msgspec.structs.replace(sizes, alarm_actors=n, alarm_rate=1_000_000_000)
    data, first = await make_population(work, burst, progress)
    node0 = Node(RuntimeSettings(data_dir=str(data)), objects=(BenchTicker,))  # not started
    paths = [node0.host.path_for(NS, node0.id_from_name(NS, ticker_name(i))) for i in range(n)]
    progress.say(f"burst: {rounds} bursts of {n:,} alarms due at one instant on {n:,} open "
                 f"actors, alternating with raw rounds of one write transaction on each of "
                 f"{n:,} open connections")
    rates: list[float] = []
    raws: list[float] = []
    lateness: list[int] = []
    p99s: list[float] = []
    activations = 0
    clock = ShiftedClock()
    for r in range(rounds):
        if r % 2:
            raws.append(await anyio.to_thread.run_sync(_raw_burst, paths))
        # Each burst at its own instant, a day after the last: nothing else is due.
        at = first + r * _DAY_MS
        clock.offset_ms = at - 3_600_000 - time.time_ns() // 1_000_000
        node = Node(RuntimeSettings(data_dir=str(data), max_active_actors=n + 64), clock=clock,
                    objects=(BenchTicker,))
        await node.start()
        try:
            rate, late, opened = await _burst(node, clock, n, at)
        finally:
            await node.stop()
        rates.append(rate)
        lateness += late
        p99s.append(percentile(late, 99))
        activations += opened
        if r % 2 == 0:
            raws.append(await anyio.to_thread.run_sync(_raw_burst, paths))
        progress.say(f"  burst {r + 1}: {rate:,.0f} alarms/s, p99 late {p99s[-1]:,.0f} ms; raw "
                     f"{raws[-1]:,.0f} tx/s")
    raw = median(raws)
    note = (f"median of {rounds} bursts of {n:,} alarms due at one instant on {n:,} open "
            f"BenchTickers (each opened by a request first), from the instant to the last "
            f"alarm's commit; {activations} files opened during the bursts")
    return [
        figure("alarm_burst_per_s", median(rates), "alarms/s", goal=Goal("ratio_at_least", 0.7),
               limit=raw, note=note + "; bursts " + ", ".join(f"{x:,.0f}" for x in rates)),
        figure("raw_burst_tx_per_s", raw, "tx/s",
               note=f"median of {len(raws)} rounds of one write transaction (the handler's "
                    f"UPDATE and the alarm row's) on each of {n:,} open sqlite3 connections "
                    "to the same files, one thread, WAL, synchronous=NORMAL; rounds "
                    + ", ".join(f"{x:,.0f}" for x in raws)),
        figure("alarm_burst_lateness_p99_ms", percentile(lateness, 99), "ms",
               goal=Goal("below", 150),
               note=f"how late each alarm of the bursts started, over all {len(lateness):,}; "
                    "per burst " + ", ".join(f"{x:,.0f}" for x in p99s)),
    ]
