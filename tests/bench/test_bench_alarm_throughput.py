"""``alarms_fired_per_s`` and its limit ``raw_open_write_close_per_s`` (``bench.ticker_figures``):
the burst on evicted actors fired in windows, a chunk of the raw cycle between each two, so that
both see the same stretch of the machine's load and disk.

Nothing here asserts a speed: what is checked is what ran when, and which files each side opened.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from mailbox_actors.alarms.scheduler import AlarmScheduler
from mailbox_actors.bench import ticker_figures
from mailbox_actors.bench.actors import BenchTicker, ticker_name
from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.node import Node
from mailbox_actors.runtime.settings import RuntimeSettings

GUARD_S = 60  # only against a hang
NS = BenchTicker.namespace


def _fired(data: Path, i: int) -> int:
    """How often ticker i's row was written (by its alarms or by the raw cycle)."""
    node = Node(RuntimeSettings(data_dir=str(data)), objects=(BenchTicker,))  # not started
    path = node.host.path_for(NS, node.id_from_name(NS, ticker_name(i)))
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT fired FROM ticks WHERE id = 1").fetchone()[0])
    finally:
        conn.close()


def _rows(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT fired FROM ticks WHERE id = 1").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_raw_chunks_alternate_with_the_bursts_windows_in_a_process_of_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PERF (issue 28): the raw cycle's chunks alternate with the burst's windows, one thread
    and ``file_threads`` by turns, and no alarm commits while a chunk runs (the burst is held
    at the bench actor's gate, before its write, and the index writes its alarms left are made
    by then: a window's work is the window's); the raw cycle runs in a process of its own on
    its own copies of actor files, never the node's, and every alarm fires once, each file the
    node opened in the windows one whose alarm fired there."""
    progress = Progress(enabled=False)
    data, first = await ticker_figures.make_population(tmp_path, TINY, progress)
    n, sample = TINY.alarm_actors, TINY.raw_alarm_sample
    target = Node(RuntimeSettings(data_dir=str(data)), objects=(BenchTicker,))  # not started
    raw = ticker_figures._copied(
        [target.host.path_for(NS, target.id_from_name(NS, ticker_name(i))) for i in range(sample)],
        tmp_path / "raw-cycle")
    chunks: list[tuple[int, int, float]] = []  # (files, threads, last commit before)
    commits_during: list[bool] = []
    real_chunk = ticker_figures._raw_in

    async def chunk(cycle: object, paths: list[Path], threads: int) -> float:
        before = BenchTicker.last_commit
        rate = await real_chunk(cycle, paths, threads)  # type: ignore[arg-type]
        chunks.append((len(paths), threads, before))
        commits_during.append(BenchTicker.last_commit != before)
        return rate

    monkeypatch.setattr(ticker_figures, "_raw_in", chunk)
    real_hold = ticker_figures._held_still
    lazy_after_hold: list[bool] = []

    async def hold(sched: AlarmScheduler, held: list[object], left: int) -> None:
        await real_hold(sched, held, left)  # type: ignore[arg-type]
        lazy_after_hold.append(sched.book.has_lazy)

    monkeypatch.setattr(ticker_figures, "_held_still", hold)
    with anyio.fail_after(GUARD_S):
        burst = await ticker_figures._throughput(data, first, TINY, progress, None, raw, 4)
    assert [(files, threads) for files, threads, _ in chunks] == [(sample // 2, 1),
                                                                  (sample // 2, 4)]
    assert len(burst.single) == 1 and len(burst.pooled) == 1
    assert not any(commits_during)
    assert lazy_after_hold and not any(lazy_after_hold)  # a hold ends with the index written
    # The first chunk ran before any alarm committed; the second after the first window's.
    assert chunks[0][2] < chunks[1][2]
    assert burst.done and burst.fired == n and burst.per_s > 0
    assert burst.activations == burst.fired
    assert all(_fired(data, i) == 1 for i in range(n))  # its alarm's one write, no raw one
    assert all(_rows(p) == 1 for p in raw)  # the raw cycle's one write each
    assert all(rate > 0 for rate in burst.single + burst.pooled)
    assert BenchTicker.held is None
