"""A node whose alarm index must be rebuilt from the actor files serves at once (AL-4, OPS-2): the
scan runs in a worker thread on the system clock, requests are answered meanwhile, alarms set
meanwhile keep their newer time, and what the scan finds fires late, never not at all. A scan cut
short leaves the index marked incomplete, so the next start scans again.

On the real clock (``TestRuntime``'s fake one scans before it serves): every wait is on an event
the test or an actor sets, under a guard against a hang, never a timed assertion."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.node import Node
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.runtime import scan as scan_module
from mailbox_actors.runtime.actor import AlarmInfo
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.testing import TestRuntime

GUARD_S = 60  # only against a hang
DAY = 86_400_000


@pytest.fixture(autouse=True)
def _clean() -> None:
    afs.reset_state()


def _node(data: Path) -> Node:
    return Node(RuntimeSettings(data_dir=str(data)), objects=afs.ALL_OBJECTS)


def _drop_index(data: Path) -> None:
    for f in data.glob("alarms.sqlite*"):
        f.unlink()


@pytest.mark.anyio
async def test_a_node_serves_while_its_index_is_rebuilt_and_the_scanned_alarms_fire_late(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AL-4: with the index gone, the node starts and answers calls while the scan is held on
    its first file; an alarm moved by a request meanwhile keeps the request's time (not the
    scan's older one); once the scan ends, the overdue alarms it found fire, each once, and the
    index is complete (no marker) and holds them."""
    clock = SystemClock()
    async with TestRuntime(tmp_path, start_ms=clock.now_ms() - 2 * DAY,
                           objects=afs.ALL_OBJECTS) as rt:
        # Due a day ago on the real clock, by which the node below starts.
        ids = [await afs.new_scratch(rt, f"s{i}", alarm_at=clock.now_ms() - DAY + i)
               for i in range(3)]
    _drop_index(tmp_path)
    hold, held = threading.Event(), threading.Event()
    real_open = scan_module.open_storage

    def held_open(*args: Any, **kw: Any) -> Any:
        held.set()
        hold.wait(GUARD_S)
        return real_open(*args, **kw)

    monkeypatch.setattr(scan_module, "open_storage", held_open)
    fired = anyio.Event()

    async def seen(actor: Scratch, info: AlarmInfo) -> None:
        if len(afs.ALARM_LOG) == 2:
            fired.set()

    for oid in ids:
        afs.ALARM_HOOKS[oid] = seen
    node = _node(tmp_path)
    merged = anyio.Event()
    merge = node._merge_scan

    def merged_then_say(found: dict[tuple[str, str], int]) -> None:
        merge(found)
        merged.set()

    node._merge_scan = merged_then_say  # type: ignore[method-assign]
    await node.start()
    try:
        with anyio.fail_after(GUARD_S):
            await anyio.to_thread.run_sync(held.wait)
        assert node.alarm_book.is_scanning
        assert (tmp_path / "alarms.sqlite.incomplete").exists()
        # Served while the scan waits: a new actor, and one of the scanned ones moved later.
        await afs.new_scratch(node, "fresh")
        later = clock.now_ms() + DAY
        await afs.scratch(node, ids[0], afs.SetAlarm(at_ms=later))
        hold.set()
        with anyio.fail_after(GUARD_S):
            await merged.wait()
            await fired.wait()
        assert sorted(s.object_id for s in afs.ALARM_LOG) == sorted(ids[1:])
        assert not (tmp_path / "alarms.sqlite.incomplete").exists()
        assert node.alarm_book.index is not None
        assert node.alarm_book.index.load().get(("scratch", ids[0])) == later
        assert await afs.scratch(node, ids[0], afs.GetAlarm()) == later
    finally:
        hold.set()
        await node.stop()


@pytest.mark.anyio
async def test_a_stop_during_the_rebuild_leaves_it_incomplete_and_the_next_start_scans_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AL-4: a node stopped while its scan is held keeps the marker (its index lacks the alarms
    still unread), so the next start scans again and finds every alarm."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        at = rt.now_ms() + 10 * DAY
        for i in range(3):
            await afs.new_scratch(rt, f"s{i}", alarm_at=at)
    _drop_index(tmp_path)
    hold, held = threading.Event(), threading.Event()
    real_open = scan_module.open_storage

    def held_open(*args: Any, **kw: Any) -> Any:
        held.set()
        hold.wait(GUARD_S)
        return real_open(*args, **kw)

    monkeypatch.setattr(scan_module, "open_storage", held_open)
    node = _node(tmp_path)
    await node.start()
    try:
        with anyio.fail_after(GUARD_S):
            await anyio.to_thread.run_sync(held.wait)
    finally:
        await node.stop()
        hold.set()
    assert (tmp_path / "alarms.sqlite.incomplete").exists()
    monkeypatch.setattr(scan_module, "open_storage", real_open)
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        assert rt.node.alarm_book.pending_count == 3
    assert not (tmp_path / "alarms.sqlite.incomplete").exists()


@pytest.mark.anyio
async def test_a_node_serves_before_its_index_is_read_and_its_alarms_fire_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AL-4 (a start that does not grow with the alarms): on the system clock the index's rows
    are read in a worker thread; while that read is held the node answers calls, and a key
    deleted meanwhile (its actor's alarm cleared) does not come back from the rows read; once
    read, the overdue alarms fire, each once."""
    clock = SystemClock()
    async with TestRuntime(tmp_path, start_ms=clock.now_ms() - 2 * DAY,
                           objects=afs.ALL_OBJECTS) as rt:
        ids = [await afs.new_scratch(rt, f"s{i}", alarm_at=clock.now_ms() - DAY + i)
               for i in range(3)]
    hold, held = threading.Event(), threading.Event()
    real_read = AlarmIndex.read

    def held_read(path: Path) -> dict[tuple[str, str], int]:
        rows = real_read(path)  # read before the request below: its row is the old one
        held.set()
        hold.wait(GUARD_S)
        return rows

    monkeypatch.setattr(AlarmIndex, "read", staticmethod(held_read))
    fired = anyio.Event()

    async def seen(actor: Scratch, info: AlarmInfo) -> None:
        if len(afs.ALARM_LOG) == 2:
            fired.set()

    for oid in ids:
        afs.ALARM_HOOKS[oid] = seen
    node = _node(tmp_path)
    await node.start()
    try:
        with anyio.fail_after(GUARD_S):
            await anyio.to_thread.run_sync(held.wait)
        assert node.alarm_book.pending_count == 0 and node.alarm_book.is_scanning
        await afs.new_scratch(node, "fresh")
        await afs.scratch(node, ids[0], afs.SetAlarm(at_ms=None))
        hold.set()
        with anyio.fail_after(GUARD_S):
            await fired.wait()
        assert sorted(s.object_id for s in afs.ALARM_LOG) == sorted(ids[1:])
        assert ("scratch", ids[0]) not in node.alarm_book.entries
        node.scheduler.flush_index()
        assert node.alarm_book.index is not None
        assert ("scratch", ids[0]) not in node.alarm_book.index.load()
    finally:
        hold.set()
        await node.stop()
