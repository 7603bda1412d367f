"""The restart figures (PERF, section 12): ``serve`` from spawn to its first answer with 0, 10,000
and 100,000 actors on disk, after a clean stop and after SIGKILL.

A node's start must not grow with its data: it reads its alarm index (one row per actor holding an
alarm) and serves; it opens no actor file. Each population is ``BenchTicker`` files, hard links
to one made through the runtime (``bench.population``: made and removed in seconds; the run
checks at its end that no start wrote one), each holding an alarm ten days ahead, and the index
that lists them (written directly: the figure is a restart, not the first start that scans).
Each round starts ``serve`` on each population twice: after a clean stop (SIGTERM), timed, then
killed with SIGKILL once it answered; then after that SIGKILL, timed, then stopped cleanly.

``serve_start_to_first_answer_ms`` (``serve`` on a directory it made itself, no actors, stopped
cleanly after each start) runs in the same alternation, so every ``serve`` figure has one limit:
the runtime libraries' start (``start_figures``' floor program, spawn to its first line), taken
twice a round in the same alternation (each place in turn) and read as the median of them all.
It was the start group's own floor until session 19, measured minutes apart from this group's in
another process; the two read 70 and 61 ms in one run (benchmark.md says why one is better).
Every side runs in the installation's environment, as ``start_figures`` explains.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.bench.actors import BenchTicker, TickInit, ticker_name
from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median
from mailbox_actors.bench.population import LinkedPopulation
from mailbox_actors.bench.start_figures import (
    _FLOOR,
    _env,
    _serve,
    _stop,
    _timed,
    first_answer,
    timed_serve,
)
from mailbox_actors.bench.start_install import installed_python
from mailbox_actors.bench.ticker_figures import NS, TENANT
from mailbox_actors.node import Node
from mailbox_actors.runtime.settings import RuntimeSettings

__all__ = ["RESTART_FIGURES", "restart_figures"]

LABELS = ("0", "10k", "100k")  # Sizes.restart_actors, in this order
SERVE_START = "serve_start_to_first_answer_ms"  # measured here, beside the restarts (session 19)
RESTART_FIGURES = (SERVE_START, *(f"serve_restart_{label}_{how}_ms"
                                  for label in LABELS for how in ("clean", "killed")))
# Targets (PERF): within 1.5x of the floor with no actors, 1.7x with 100,000.
_GOALS = {"0": 1.5, "100k": 1.7}
_TEN_DAYS_MS = 10 * 86_400_000
Side = tuple[str, Callable[..., float], tuple[object, ...]]


async def _template(tpl: Path) -> tuple[Path, int]:
    """One BenchTicker file made through the runtime, holding an alarm ten days ahead, its log
    folded in (one file to link); and that alarm's time."""
    at = time.time_ns() // 1_000_000 + _TEN_DAYS_MS
    async with Node(RuntimeSettings(data_dir=str(tpl)), objects=(BenchTicker,)) as node:
        oid = node.id_from_name(NS, "template")
        await node.call(NS, oid, TickInit(alarm_at_ms=at), tenant_id=TENANT)
        source = node.host.path_for(NS, oid)
    with sqlite3.connect(source) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return source, at


def _population(data: Path, n: int, source: Path, at: int,
                progress: Progress) -> LinkedPopulation:
    """``n`` BenchTicker files under ``data`` (links to ``source``, see ``bench.population``) and
    the alarm index listing them."""
    data.mkdir(parents=True)
    population = LinkedPopulation(source, data.parent / f"{data.name}-sources")
    target = Node(RuntimeSettings(data_dir=str(data)), objects=(BenchTicker,))  # not started
    oids = [target.id_from_name(NS, ticker_name(i)) for i in range(n)]
    population.link((target.host.path_for(NS, oid) for oid in oids), n, progress)
    # An index even with no actors: without one the first start scans and marks the index
    # incomplete until its scan is merged, so whether the timed starts found the marker depended
    # on whether a warm-up start was stopped before its scan ended.
    index = AlarmIndex(data / "alarms.sqlite")
    index.apply({(NS, oid): at for oid in oids})
    index.close()
    return population


def _timed_restart(python: str, data: Path, env: dict[str, str], then: signal.Signals) -> float:
    """Milliseconds from spawning ``serve`` on ``data`` to its first answer; then it is ended
    with ``then`` (SIGKILL: the next start is one after a crash)."""
    t = time.perf_counter()
    proc, url = _serve(python, data, env)
    try:
        first_answer(url)
        ms = (time.perf_counter() - t) * 1000
    except BaseException:
        _stop(proc, signal.SIGKILL)
        raise
    _stop(proc, then)
    return ms


async def restart_figures(work: Path, sizes: Sizes, progress: Progress) -> list[Figure]:
    python = await anyio.to_thread.run_sync(installed_python, work / "installed")
    env = _env(work)
    counts = dict(zip(LABELS, sizes.restart_actors, strict=True))
    source, at = await _template(work / "template")
    populations = []
    for label, n in counts.items():
        progress.say(f"restart: a data directory with {n:,} actors holding alarms")
        populations.append(await anyio.to_thread.run_sync(
            _population, work / f"n{label}", n, source, at, progress))
    stamps = [p.stamp() for p in populations]
    # As many rounds as the start figures take; the floor twice a round (its median is every
    # figure's limit, so it has twice the samples of any one side).
    rounds = sizes.start_rounds
    progress.say(f"restart: {rounds} rounds of serve started on a new directory and on each "
                 "population, after a clean stop and after SIGKILL, alternating with the runtime "
                 "libraries' start (twice a round)")
    floor: Side = ("floor", _timed, ([python, *_FLOOR], env))
    serve = work / "serve"  # no actors; made by serve's first (warm-up) start, as a user's is
    units: list[list[Side]] = [[floor], [("serve", timed_serve, (python, serve, env))]]
    for label in counts:
        data = work / f"n{label}"
        # In this order: the pair is what makes the second start one after SIGKILL.
        units.append([(f"{label}_clean", _timed_restart, (python, data, env, signal.SIGKILL)),
                      (f"{label}_killed", _timed_restart, (python, data, env, signal.SIGTERM))])
    units.insert(len(units) // 2 + 1, [floor])  # half a round from the other, whatever the turn
    # Warm-up (tokens, the control database, compiled bytecode, the OS's caches): the floor, a
    # serve start, and a clean start and a killed one on each population, so the first timed
    # "clean" start follows a clean stop.
    await anyio.to_thread.run_sync(_timed, [python, *_FLOOR], env)
    await anyio.to_thread.run_sync(timed_serve, python, serve, env)
    for label in counts:
        for then in (signal.SIGKILL, signal.SIGTERM):
            await anyio.to_thread.run_sync(_timed_restart, python, work / f"n{label}", env, then)
    ms: dict[str, list[float]] = {}
    for r in range(rounds):
        for unit in units[r % len(units):] + units[:r % len(units)]:  # each place in turn
            for name, fn, args in unit:
                ms.setdefault(name, []).append(await anyio.to_thread.run_sync(fn, *args))
    for population, stamp in zip(populations, stamps, strict=True):
        population.check_unwritten(stamp)  # a start opens no actor file, let alone writes one
    limit = median(ms["floor"])
    said = (f"the limit is the runtime libraries' start ({limit:.0f} ms, median of "
            f"{len(ms['floor'])}, twice a round in the same alternation); in an installation's "
            "environment")
    out = [figure(SERVE_START, median(ms["serve"]), "ms", goal=Goal("ratio_at_most", 1.5),
                  limit=limit,
                  note=f"median of {rounds} `serve` starts on a data directory with 0 actors "
                       "(made by its own first start), each stopped cleanly, from spawn to "
                       f"/healthz answered after it says it listens, alternating with the "
                       f"restarts; {said}")]
    for label, n in counts.items():
        for how, after in (("clean", "a clean stop (SIGTERM)"), ("killed", "SIGKILL")):
            value = median(ms[f"{label}_{how}"])
            note = (f"median of {rounds} `serve` starts on a data directory with {n:,} actors "
                    f"holding alarms (their index listing them), after {after}, from spawn to "
                    f"/healthz answered after it says it listens; {said}")
            goal = _GOALS.get(label)
            if goal is None:
                out.append(Figure(figure=f"serve_restart_{label}_{how}_ms", value=value,
                                  unit="ms", limit=limit, ratio=value / limit,
                                  target="no target (limit: the runtime libraries' start)",
                                  note=note))
            else:
                out.append(figure(f"serve_restart_{label}_{how}_ms", value, "ms",
                                  goal=Goal("ratio_at_most", goal), limit=limit, note=note))
    return out
