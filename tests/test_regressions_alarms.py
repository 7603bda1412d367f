"""Regression tests for alarm and outbox defects found in review (AL-3, AL-4, AL-5, EV-2): a purpose
interrupted by a crash, a failed purpose hidden behind another's re-schedule, a start-up scan killed
part-way, a heap that grew with every move, and an event sink that held its first publisher."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import _procs
import _regress_proc
import actors_for_tests as afs
from mailbox_actors.testing import TestRuntime
from mailbox_actors.webhooks.publish import ControlEventSink
from mailbox_actors.wire.control import EventIndexRow
from mailbox_actors.wire.events import Event

HOUR = 3_600_000
T0 = 1_800_000_000_000


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    afs.reset_state()
    yield
    afs.reset_state()


# ---- AL-4: crashes ---------------------------------------------------------------------------


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
async def test_scan_killed_part_way_leaves_no_index_and_next_start_finds_every_alarm(
        tmp_path: Path) -> None:
    """AL-4: a rescan of the actor files (alarms.sqlite deleted) killed with SIGKILL part-way
    leaves no index behind, so the next start scans again and every alarm is still there."""
    data = tmp_path / "data"
    async with TestRuntime(data, start_ms=T0, objects=afs.ALL_OBJECTS) as rt:
        ids = [await afs.new_scratch(rt, f"s{i}", alarm_at=T0 + (i + 1) * 60_000) for i in range(4)]
    for f in data.glob("alarms.sqlite*"):
        f.unlink()

    assert run_child_until("scan", data, tmp_path / "child.log") == "SCANNING"
    assert not (data / "alarms.sqlite").exists()

    async with TestRuntime(data, start_ms=T0, objects=afs.ALL_OBJECTS) as rt:
        assert rt.node.scheduler is not None and rt.node.scheduler.pending_count == 4
        await rt.advance(HOUR)
        assert sorted(s.object_id for s in afs.ALARM_LOG) == sorted(ids)
    async with TestRuntime(data, start_ms=T0 + HOUR, objects=afs.ALL_OBJECTS) as rt:
        assert rt.node.scheduler is not None and rt.node.scheduler.pending_count == 0


# ---- AL-3: retries ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_failed_purpose_is_retried_within_backoff_after_another_rescheduled_a_day_later(
        tmp_path: Path) -> None:
    """AL-3: when one purpose fails after another re-scheduled itself a day later, the failed one
    is retried after the first backoff (2 s plus at most 25%), not a day later."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = rt.id_from_name("purposes", "p")
        await rt.call("purposes", oid, afs.PInit(), tenant_id=afs.TENANT)
        t = rt.now_ms() + 1_000
        for purpose in ("maintenance", "outbox"):
            await rt.call("purposes", oid, afs.Schedule(purpose=purpose, at_ms=t),
                          tenant_id=afs.TENANT)
        afs.FAIL_PURPOSE_ONCE.add("outbox")

        await rt.advance(1_000)
        assert afs.PURPOSE_LOG == [(oid, "maintenance", t)]
        state = await rt.call("purposes", oid, afs.PState(), tenant_id=afs.TENANT)
        assert state["scheduled"] == {"maintenance": t + afs.DAY_MS, "outbox": t}

        await rt.advance(2_500)
        assert [p for _, p, _ in afs.PURPOSE_LOG] == ["maintenance", "outbox"]
        assert 2_000 <= afs.PURPOSE_LOG[1][2] - t <= 2_500
        state = await rt.call("purposes", oid, afs.PState(), tenant_id=afs.TENANT)
        assert state == {"alarm": t + afs.DAY_MS, "scheduled": {"maintenance": t + afs.DAY_MS}}


# ---- AL-5: the scheduler's heap --------------------------------------------------------------


@pytest.mark.anyio
async def test_moving_one_alarm_many_times_keeps_the_heap_bounded(tmp_path: Path) -> None:
    """AL-5: moving one alarm thousands of times keeps the scheduler's heap within a small multiple
    of the pending alarms plus 1024 entries, and the alarm still fires once, at its last time."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        sched = rt.node.scheduler
        assert sched is not None
        oid = await afs.new_scratch(rt, "moved")
        largest = 0
        at = 0
        for i in range(3_000):  # e.g. an inactivity timer pushed back on every request
            at = rt.now_ms() + HOUR - i
            await afs.scratch(rt, oid, afs.SetAlarm(at_ms=at))
            largest = max(largest, len(sched._heap))
            assert len(sched._heap) <= 4 * sched.pending_count + 1024
        assert sched.pending_count == 1 and largest > 1_000  # the moves did pile up, then shrank
        await rt.advance(HOUR)
        assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(oid, at)]


# ---- EV-2: the event sink under a stream of publishers ---------------------------------------


class SlowControlPlane:
    """Stands in for the control database and the queues: each write takes a fixed number of
    scheduler turns, and the shared log records it when it is done."""

    TURNS = 4

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    async def index_events(self, rows: list[EventIndexRow]) -> None:
        for _ in range(self.TURNS):
            await anyio.lowlevel.checkpoint()
        self.log.append(("indexed", [r.event_id for r in rows]))

    async def send_batch(self, queue: str, bodies: list[dict[str, Any]]) -> None:
        for _ in range(self.TURNS):
            await anyio.lowlevel.checkpoint()
        self.log.append(("sent", [b["event"]["id"] for b in bodies]))


@pytest.mark.anyio
async def test_every_event_is_indexed_before_it_is_queued() -> None:
    """EV-2: the outbox writes an event's index row, then its queue message: a receiver is never
    sent an event the index does not have yet, even when the index is the slower write."""

    class SlowIndex(SlowControlPlane):
        async def index_events(self, rows: list[EventIndexRow]) -> None:
            for _ in range(3 * self.TURNS):
                await anyio.lowlevel.checkpoint()
            await super().index_events(rows)

    plane = SlowIndex()
    sink = ControlEventSink(plane, plane)  # type: ignore[arg-type]

    async def publish(i: int) -> None:
        event = Event(id=f"evt_{i}", type="x", sequence=i, tenant_id="t", occurred_at_ms=0)
        await sink.publish("scratch", f"actor-{i}", [event])

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(publish, i)
            await anyio.lowlevel.checkpoint()
    first: dict[tuple[str, str], int] = {}
    for at, (kind, ids) in enumerate(plane.log):
        for event_id in ids:
            first.setdefault((kind, event_id), at)
    for i in range(20):
        assert first[("indexed", f"evt_{i}")] < first[("sent", f"evt_{i}")]


@pytest.mark.anyio
async def test_first_publisher_returns_once_its_own_group_is_written() -> None:
    """EV-2: under a steady stream of publishers, the event sink's first publisher returns as soon
    as its own group is written, not after the whole stream; no publisher returns earlier."""
    plane = SlowControlPlane()
    sink = ControlEventSink(plane, plane)  # type: ignore[arg-type]
    log = plane.log
    n = 100

    async def publish(i: int) -> None:
        event = Event(id=f"evt_{i}", type="x", sequence=i, tenant_id="t", occurred_at_ms=0)
        await sink.publish("scratch", f"actor-{i}", [event])
        log.append(("returned", i))

    async with anyio.create_task_group() as tg:
        for i in range(n):  # a new publisher at every turn of the loop
            tg.start_soon(publish, i)
            await anyio.lowlevel.checkpoint()

    first = log.index(("returned", 0))
    writes_before = [entry for entry in log[:first] if entry[0] == "sent"]
    writes_after = [entry for entry in log[first:] if entry[0] == "sent"]
    assert writes_before == [("sent", ["evt_0"])]
    assert len(writes_after) >= 3  # the stream went on for several more groups
    sent = list(itertools.chain.from_iterable(ids for kind, ids in log if kind == "sent"))
    assert sorted(sent) == sorted(f"evt_{i}" for i in range(n))
    for i in range(n):
        returned = log.index(("returned", i))
        assert any(f"evt_{i}" in ids for kind, ids in log[:returned] if kind == "sent")
