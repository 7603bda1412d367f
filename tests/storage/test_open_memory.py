"""What an open actor keeps in memory (RT-9, OPS-4, section 12's memory row): once it is open, the
pages and prepared statements of the runtime's own open-time reads are freed (ADR 0015), so an
actor that served a read holds no more SQLite heap than a bare connection after the same read, and
it goes on reading and writing as before.
"""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from mailbox_actors.bench.actors import BenchTicker, TickInit, TickRead, ticker_name
from mailbox_actors.bench.memory_figures import sqlite_heap_fn
from mailbox_actors.node import Node
from mailbox_actors.platform.storage.opening import connect_ahead
from mailbox_actors.runtime.activation import META_KEYS
from mailbox_actors.runtime.settings import RuntimeSettings

COUNT = 16
NS = BenchTicker.namespace


def _heap_and_settings(tmp_path: Path) -> tuple[Callable[[], int], RuntimeSettings]:
    """SQLite's heap in use (skipped where this SQLite does not say it), and a node's settings
    that keep every actor of the test open."""
    heap = sqlite_heap_fn()
    if heap is None:
        pytest.skip("sqlite3_memory_used of the module's SQLite is not reachable here")
    return heap, RuntimeSettings(data_dir=str(tmp_path), max_active_actors=COUNT + 4,
                                 idle_ms=3_600_000)


async def _still_read_and_written(node: Node, oids: list[str]) -> None:
    """What was shed is read or prepared again when needed: each actor runs its alarm's write
    and reads it back."""
    for oid in oids:
        assert await node.fire_alarm_now(NS, oid)
        assert await node.call(NS, oid, TickRead(), tenant_id="t_mem") == 1


def _assert_within_bare(runtime: int, paths: list[Path], heap: Callable[[], int]) -> None:
    """``runtime`` (the SQLite heap the open actors grew) is within 10% of what bare connections
    to ``paths`` grow after the same read."""
    before = heap()
    bare = []
    for path in paths:
        conn = sqlite3.connect(path, isolation_level=None)
        assert conn.execute("SELECT fired FROM ticks WHERE id = 1").fetchall() == [(1,)]
        bare.append(conn)
    bare_heap = heap() - before
    for conn in bare:
        conn.close()
    assert runtime <= bare_heap * 1.1, (runtime / COUNT, bare_heap / COUNT)


@pytest.mark.anyio
async def test_an_open_actor_holds_the_sqlite_heap_of_a_bare_connection(tmp_path: Path) -> None:
    """Section 12 (memory per active actor), RT-9: 16 actors opened by a read and kept open grow
    SQLite's heap by no more than 16 bare connections to the same files after the same read
    (within 10%); each then runs its alarm handler's write and reads it back."""
    heap, settings = _heap_and_settings(tmp_path)
    async with Node(settings, objects=(BenchTicker,)) as node:
        oids = [node.id_from_name(NS, ticker_name(i)) for i in range(COUNT + 1)]
        for oid in oids:
            await node.call(NS, oid, TickInit(alarm_at_ms=node.clock.now_ms() + 86_400_000),
                            tenant_id="t_mem")
        await node.call(NS, oids[0], TickRead(), tenant_id="t_mem")  # the request path, warm
        node.host.evict_all_idle()
        before = heap()
        for oid in oids[1:]:
            assert await node.call(NS, oid, TickRead(), tenant_id="t_mem") == 0
        runtime = heap() - before
        assert node.host.active_count == COUNT
        paths = [node.host.path_for(NS, oid) for oid in oids[1:]]
        await _still_read_and_written(node, oids[1:])
    _assert_within_bare(runtime, paths, heap)


@pytest.mark.anyio
async def test_evicted_actors_are_gone_when_the_allocator_gives_their_memory_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Section 12 (RSS back within 10% after eviction), OPS-4: when a mass eviction asks the C
    allocator to return free pages to the system, no evicted actor's storage or connection is
    still alive (a reference held until after that call kept their memory in the heap)."""
    from mailbox_actors.platform.storage.sql import SqlStorage
    from mailbox_actors.runtime import host as host_module

    alive_at_give_back: list[tuple[int, int]] = []

    def counting_give_back(collect: bool = False) -> bool:
        gc.collect()
        alive_at_give_back.append((
            sum(1 for o in gc.get_objects() if isinstance(o, SqlStorage)),
            sum(1 for o in gc.get_objects() if isinstance(o, sqlite3.Connection))))
        return False

    settings = RuntimeSettings(data_dir=str(tmp_path), max_active_actors=COUNT + 4,
                               idle_ms=3_600_000)
    async with Node(settings, objects=(BenchTicker,)) as node:
        oids = [node.id_from_name(NS, ticker_name(i)) for i in range(COUNT)]
        for oid in oids:
            await node.call(NS, oid, TickInit(alarm_at_ms=node.clock.now_ms() + 86_400_000),
                            tenant_id="t_mem")
        connections = sum(1 for o in gc.get_objects() if isinstance(o, sqlite3.Connection))
        monkeypatch.setattr(host_module, "give_back", counting_give_back)
        assert node.host.evict_all_idle() == COUNT
    storages, still_connected = alive_at_give_back[0]
    assert storages == 0 and still_connected <= connections - COUNT


@pytest.mark.anyio
async def test_an_open_actors_storage_keeps_a_small_instance_dict(tmp_path: Path) -> None:
    """Section 12 (memory per active actor): the storage's connection and API fields are slots,
    so its instance dict holds only the transaction state's fields, fewer than the 30 whose keys
    CPython shares between instances (past them each storage would build a 1.5 KB dict)."""
    async with Node(RuntimeSettings(data_dir=str(tmp_path)), objects=(BenchTicker,)) as node:
        oid = node.id_from_name(NS, ticker_name(0))
        await node.call(NS, oid, TickInit(alarm_at_ms=node.clock.now_ms() + 86_400_000),
                        tenant_id="t_mem")
        storage = node.host._active[(NS, oid)].runtime_storage.sql
        fields = vars(storage)
        assert len(fields) < 30, sorted(fields)
        assert not {"_conn", "path", "limits", "_plans", "made", "keeps_wal"} & fields.keys()


@pytest.mark.anyio
async def test_an_actor_opened_ahead_holds_the_sqlite_heap_of_a_bare_connection(
        tmp_path: Path) -> None:
    """Section 12 (memory per active actor), RT-9, AL-4: actors whose files a worker thread
    opened ahead of their alarms (``connect_ahead``: the first read made there, and what it left
    cached shed there) grow SQLite's heap, once activated, by no more than as many bare
    connections after the same read (within 10%); each then runs its alarm handler's write."""
    heap, settings = _heap_and_settings(tmp_path)
    async with Node(settings, objects=(BenchTicker,)) as node:
        host = node.host
        oids = [node.id_from_name(NS, ticker_name(i)) for i in range(COUNT + 1)]
        for oid in oids:
            await node.call(NS, oid, TickInit(alarm_at_ms=node.clock.now_ms() + 86_400_000),
                            tenant_id="t_mem")
        host.evict_all_idle()
        paths = [host.path_for(NS, oid) for oid in oids]
        durability, limits = host.settings.durability, host.settings.limits
        warm = connect_ahead(paths[0], durability, limits, META_KEYS)  # the path's first use
        assert host.activate(BenchTicker, oids[0], create=False, ahead=warm) is not None
        before = heap()
        for oid, path in zip(oids[1:], paths[1:], strict=True):
            ahead = connect_ahead(path, durability, limits, META_KEYS)
            assert ahead is not None
            assert host.activate(BenchTicker, oid, create=False, ahead=ahead) is not None
        runtime = heap() - before
        await _still_read_and_written(node, oids[1:])
    _assert_within_bare(runtime, paths[1:], heap)
