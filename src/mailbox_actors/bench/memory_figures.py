"""The memory figures: bytes per evicted actor holding an alarm, and per active (open) actor.

Python objects are counted with ``tracemalloc``, SQLite's own heap with ``sqlite3_memory_used()``
(through ctypes, from the library ``_sqlite3`` is linked to), and the process RSS beside them. Active
actors are measured in a fresh child process, so the RSS delta is not hidden by freed memory reused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sqlite3
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec

from mailbox_actors.bench.actors import BenchTicker, TickRead, ticker_name
from mailbox_actors.bench.figures import Figure, Goal, Progress, figure
from mailbox_actors.bench.runtime_figures import envelope
from mailbox_actors.node import Node
from mailbox_actors.platform.logging import configure_logging
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.settings import RuntimeSettings

__all__ = ["Probe", "Sample", "active_memory", "evicted_memory", "rss_bytes", "sqlite_heap_fn"]


def sqlite_heap_fn() -> Callable[[], int] | None:
    """``sqlite3_memory_used`` of the SQLite the ``sqlite3`` module uses, or None when that
    library cannot be reached (a statically linked build would give another copy's counter)."""
    name = ctypes.util.find_library("sqlite3")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        lib.sqlite3_libversion.restype = ctypes.c_char_p
    except (OSError, AttributeError):
        return None
    if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
        return None
    before = int(lib.sqlite3_memory_used())
    probe = sqlite3.connect(":memory:")
    opened = int(lib.sqlite3_memory_used())
    probe.close()
    if opened <= before:
        return None  # another copy of the library than the module's
    return lambda: int(lib.sqlite3_memory_used())


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Sample(msgspec.Struct, frozen=True):
    """Bytes: Python heap (tracemalloc), SQLite heap, RSS less tracemalloc's own bookkeeping."""

    py: int
    sqlite: int
    rss: int | None


class Probe:
    """Memory now minus memory at ``reset()``. Needs tracemalloc running."""

    def __init__(self) -> None:
        self._sqlite = sqlite_heap_fn()
        self._base = self._read()

    def _read(self) -> Sample:
        gc.collect()
        rss = rss_bytes()
        return Sample(py=tracemalloc.get_traced_memory()[0],
                      sqlite=self._sqlite() if self._sqlite is not None else 0,
                      rss=None if rss is None else rss - tracemalloc.get_tracemalloc_memory())

    def reset(self) -> None:
        self._base = self._read()

    def delta(self) -> Sample:
        now, base = self._read(), self._base
        return Sample(py=now.py - base.py, sqlite=now.sqlite - base.sqlite,
                      rss=None if now.rss is None or base.rss is None else now.rss - base.rss)

    @property
    def counts_sqlite(self) -> bool:
        return self._sqlite is not None


def _parts(s: Sample, n: int, counts_sqlite: bool) -> str:
    sq = f"SQLite heap {s.sqlite / n:,.0f} B" if counts_sqlite else "SQLite heap not readable"
    rss = "RSS not readable" if s.rss is None else f"RSS {s.rss / n:,.0f} B"
    return f"per actor: Python heap {s.py / n:,.0f} B, {sq}, {rss}"


async def evicted_memory(data: Path, empty: Path, n: int, cls: type[Actor], progress: Progress,
                         scale: str) -> list[Figure]:
    """A node started on ``data`` holds every alarm and no open actor; an empty node is the base."""
    progress.say("memory: a node holding the population's alarms, no actor open")
    empty.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - setup; nothing else runs yet
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        probe = Probe()
        async with Node(RuntimeSettings(data_dir=str(empty)), objects=(cls,)):
            base = probe.delta()
        probe.reset()
        async with Node(RuntimeSettings(data_dir=str(data)), objects=(cls,)) as node:
            full = probe.delta()
            assert node.scheduler is not None
            held, active = node.scheduler.pending_count, node.host.active_count
        counts_sqlite = probe.counts_sqlite
    finally:
        if not tracing:
            tracemalloc.stop()
    if held != n or active:
        raise RuntimeError(f"expected {n} alarms and no open actor, found {held} and {active}")
    s = Sample(py=full.py - base.py, sqlite=full.sqlite - base.sqlite,
               rss=None if full.rss is None or base.rss is None else full.rss - base.rss)
    return [figure("memory_per_evicted_actor_bytes", (s.py + s.sqlite) / n, "B",
                   goal=Goal("below", 1024),
                   note=f"{scale}; value = Python heap + SQLite heap of a node that loaded them, "
                        f"less an empty node; {_parts(s, n, counts_sqlite)}")]


async def active_memory(data: Path, count: int, progress: Progress) -> list[Figure]:
    """Open ``count`` of the population's actors in a fresh process and keep them open; beside
    them, ``count`` plain ``sqlite3`` connections to others, each after the same one read."""
    progress.say(f"memory: {count:,} actors activated and kept open, and {count:,} raw "
                 "connections (in a fresh process)")
    done = await anyio.run_process(
        [sys.executable, "-m", "mailbox_actors.bench.memory_figures", str(data), str(count)],
        check=False)
    if done.returncode != 0:
        raise RuntimeError("the active-memory process failed: "
                           + done.stderr.decode(errors="replace")[-2000:])
    rt, raw, counts_sqlite = msgspec.json.decode(done.stdout.splitlines()[-1],
                                                 type=tuple[Sample, Sample, bool])
    if rt.rss is None or raw.rss is None:
        value, limit, what = (rt.py + rt.sqlite) / count, (raw.py + raw.sqlite) / count, "heap"
    else:
        value, limit, what = rt.rss / count, raw.rss / count, "RSS"
    return [figure("memory_per_active_actor_bytes", value, "B", goal=Goal("below", 50 * 1024),
                   limit=limit,
                   note=f"{count:,} actors opened by a read and kept open; value = {what} growth "
                        f"per actor; {_parts(rt, count, counts_sqlite)}; limit = the same for a "
                        f"plain sqlite3 connection after the same read: "
                        f"{_parts(raw, count, counts_sqlite)}")]


async def _active_child(data: str, count: int) -> tuple[Sample, Sample, bool]:
    ns = BenchTicker.namespace
    tracemalloc.start()
    async with Node(RuntimeSettings(data_dir=data, max_active_actors=count + 16,
                                    idle_ms=3_600_000), objects=(BenchTicker,)) as node:
        oids = [node.id_from_name(ns, ticker_name(i)) for i in range(2 * count)]
        paths = [node.host.path_for(ns, oid) for oid in oids[count:]]
        read = envelope(TickRead())
        probe = Probe()
        for oid in oids[:count]:
            out = await node.call_bytes(ns, oid, read)
            if not out.startswith(b'{"ok"'):
                raise RuntimeError(f"benchmark call failed: {out[:300]!r}")
        rt = probe.delta()
        if node.host.active_count != count:
            raise RuntimeError(f"expected {count} open actors, found {node.host.active_count}")
        probe.reset()
        conns = []
        for path in paths:
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("SELECT fired FROM ticks WHERE id = 1").fetchall()
            conns.append(conn)
        raw = probe.delta()
        for conn in conns:
            conn.close()
    return rt, raw, probe.counts_sqlite


if __name__ == "__main__":
    configure_logging(level="warning")
    result = anyio.run(_active_child, sys.argv[1], int(sys.argv[2]))
    sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
