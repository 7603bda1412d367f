"""No alarm lost across a restart (AL-4): a node finds every pending alarm when it starts, fires the
ones that came due while it was down at once, and a stale node-level index only ever wakes an actor
early or for nothing, invisibly to its handler. (The SIGKILL variant is in test_rt_processes.py.)"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

import _procs
import _regress_proc
import actors_for_tests as afs
from mailbox_actors.testing import TestRuntime

HOUR = 3_600_000


async def setup_alarms(data: Path, t0: int, offsets: dict[str, int]) -> dict[str, str]:
    async with TestRuntime(data, start_ms=t0, objects=afs.ALL_OBJECTS) as rt:
        return {n: await afs.new_scratch(rt, n, alarm_at=t0 + off) for n, off in offsets.items()}


def delete_index(data: Path) -> None:
    for f in data.glob("alarms.sqlite*"):
        f.unlink()


@pytest.mark.anyio
@pytest.mark.parametrize("index", ["kept", "deleted"])
async def test_alarms_that_came_due_while_down_fire_at_once_on_start(
        tmp_path: Path, index: str) -> None:
    """AL-4: after a restart, alarms that came due while the node was down fire at once (at
    run_until_idle, without advancing the clock), later ones at their time; this holds whether the
    node's alarm index is there or was deleted (then the actor files are scanned)."""
    t0 = 1_800_000_000_000
    ids = await setup_alarms(tmp_path, t0, {"a": 1_000, "b": HOUR, "c": 2 * HOUR, "d": 5 * HOUR})
    if index == "deleted":
        delete_index(tmp_path)
    restart = t0 + 3 * HOUR
    async with TestRuntime(tmp_path, start_ms=restart, objects=afs.ALL_OBJECTS) as rt:
        assert rt.node.scheduler is not None and rt.node.scheduler.pending_count == 4
        await rt.run_until_idle()
        assert rt.now_ms() == restart
        fired = {(s.object_id, s.scheduled_ms, s.now_ms) for s in afs.ALARM_LOG}
        assert fired == {(ids["a"], t0 + 1_000, restart), (ids["b"], t0 + HOUR, restart),
                         (ids["c"], t0 + 2 * HOUR, restart)}
        await rt.advance(2 * HOUR - 1)
        assert len(afs.ALARM_LOG) == 3
        await rt.advance(1)
        assert (afs.ALARM_LOG[-1].object_id, afs.ALARM_LOG[-1].now_ms) == (ids["d"], t0 + 5 * HOUR)
        for oid in ids.values():
            assert await afs.scratch(rt, oid, afs.GetAlarm()) is None


@pytest.mark.anyio
async def test_alarms_do_not_leak_between_runtimes(tmp_path: Path) -> None:
    """AL-4: alarms belong to their data directory: a fresh TestRuntime (its own temporary
    directory) sees none of another test's alarms."""
    t0 = 1_800_000_000_000
    await setup_alarms(tmp_path, t0, {"a": 1_000})
    async with TestRuntime(start_ms=t0 + HOUR, objects=afs.ALL_OBJECTS) as rt:
        assert rt.node.scheduler is not None and rt.node.scheduler.pending_count == 0
        await rt.advance(HOUR)
        assert afs.ALARM_LOG == []


def index_rows(data: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(data / "alarms.sqlite")) as conn:
        return {oid: at for _, oid, at in conn.execute("SELECT * FROM alarms")}


def set_index(data: Path, ns: str, oid: str, at: int) -> None:
    with contextlib.closing(sqlite3.connect(data / "alarms.sqlite")) as conn:
        conn.execute("INSERT OR REPLACE INTO alarms (namespace, object_id, at_ms) VALUES (?, ?, ?)",
                     (ns, oid, at))
        conn.commit()


@pytest.mark.anyio
async def test_stale_index_wakes_early_or_for_nothing_never_late(tmp_path: Path) -> None:
    """AL-4: an index entry earlier than the actor's stored alarm, or for an actor with no alarm,
    causes at most a spurious wake that no handler sees; the stored alarm fires at its own time."""
    t0 = 1_800_000_000_000
    ids = await setup_alarms(tmp_path, t0, {"moved": 10 * HOUR})
    async with TestRuntime(tmp_path, start_ms=t0, objects=afs.ALL_OBJECTS) as rt:
        gone = await afs.new_scratch(rt, "gone", alarm_at=t0 + HOUR)
        await afs.scratch(rt, gone, afs.SetAlarm(at_ms=None))
    # As after a crash before the index caught up: it says "moved" is due in 1 h, "gone" in 1 h.
    set_index(tmp_path, "scratch", ids["moved"], t0 + HOUR)
    set_index(tmp_path, "scratch", gone, t0 + HOUR)
    assert index_rows(tmp_path)[ids["moved"]] == t0 + HOUR

    async with TestRuntime(tmp_path, start_ms=t0 + 2 * HOUR, objects=afs.ALL_OBJECTS) as rt:
        await rt.run_until_idle()
        assert afs.ALARM_LOG == []
        assert rt.node.metrics.get("alarms_fired_total", (("namespace", "scratch"),)) == 0
        await rt.advance(8 * HOUR)
        assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(ids["moved"], t0 + 10 * HOUR)]
        assert await afs.scratch(rt, gone, afs.Fired()) == []


@pytest.mark.anyio
async def test_alarm_moved_earlier_reaches_the_index_before_commit(tmp_path: Path) -> None:
    """AL-4: an alarm moved earlier is in the node's index as soon as its transaction commits, so a
    crash right after cannot make it late."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        oid = await afs.new_scratch(rt, "a", alarm_at=t0 + 10 * HOUR)
        assert index_rows(tmp_path)[oid] <= t0 + 10 * HOUR
        await afs.scratch(rt, oid, afs.SetAlarm(at_ms=t0 + HOUR))
        # Read by another connection while the node still runs: no flush, no stop needed.
        assert index_rows(tmp_path)[oid] <= t0 + HOUR


T0 = 1_800_000_000_000


def run_child_until(mode: str, data: Path, log: Path) -> str:
    """Run ``_regress_proc.py MODE DATA`` until its first line, SIGKILL it (by pid), return the line."""
    with open(log, "w") as err:
        proc = _regress_proc.spawn(mode, data, log=err)
        try:
            return _procs.read_line(proc)
        finally:
            _procs.kill(proc)


@pytest.mark.anyio
async def test_purpose_interrupted_by_sigkill_runs_after_restart(tmp_path: Path) -> None:
    """AL-4: a process killed with SIGKILL while an alarm purpose's method runs leaves the purpose
    pending, so the restarted node runs it (and then clears it)."""
    data = tmp_path / "data"
    kind, oid, fired_at = run_child_until("purpose", data, tmp_path / "child.log").split()
    assert kind == "RUNNING"

    restart = int(fired_at) + 10_000
    async with TestRuntime(data, start_ms=restart, objects=afs.ALL_OBJECTS) as rt:
        await rt.run_until_idle()
        assert afs.PURPOSE_LOG == [(oid, "check", restart)]
        state = await rt.call("purposes", oid, afs.PState(), tenant_id=afs.TENANT)
        assert state == {"alarm": None, "scheduled": {}}


@pytest.mark.anyio
async def test_scan_killed_part_way_leaves_the_index_incomplete_and_next_start_finds_every_alarm(
        tmp_path: Path) -> None:
    """AL-4: a rescan of the actor files (alarms.sqlite deleted) killed with SIGKILL part-way
    leaves the index marked incomplete, so the next start scans again and every alarm is still
    there (and the index is then complete)."""
    data = tmp_path / "data"
    async with TestRuntime(data, start_ms=T0, objects=afs.ALL_OBJECTS) as rt:
        ids = [await afs.new_scratch(rt, f"s{i}", alarm_at=T0 + (i + 1) * 60_000) for i in range(4)]
    for f in data.glob("alarms.sqlite*"):
        f.unlink()

    assert run_child_until("scan", data, tmp_path / "child.log") == "SCANNING"
    assert (data / "alarms.sqlite.incomplete").exists()

    async with TestRuntime(data, start_ms=T0, objects=afs.ALL_OBJECTS) as rt:
        assert rt.node.scheduler is not None and rt.node.scheduler.pending_count == 4
        await rt.advance(HOUR)
        assert sorted(s.object_id for s in afs.ALARM_LOG) == sorted(ids)
    assert not (data / "alarms.sqlite.incomplete").exists()
    async with TestRuntime(data, start_ms=T0 + HOUR, objects=afs.ALL_OBJECTS) as rt:
        assert rt.node.scheduler is not None and rt.node.scheduler.pending_count == 0


@pytest.mark.anyio
async def test_a_start_without_a_namespace_keeps_its_alarms_for_a_later_start(
        tmp_path: Path) -> None:
    """AL-4: a node started once without an object class (a deploy that left it out) does not
    drop that class's alarms from the index: the next start with the class fires them."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 60_000)
    async with TestRuntime(tmp_path) as rt:  # the default objects only: no Scratch
        await rt.advance(120_000)
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        await rt.advance(HOUR)
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
