"""Real processes on one data directory: single activation (RT-3) and crash safety (RT-11, AL-4).

The node processes are ``tests/support/_procs.py`` running on the system clock; the test kills them with
SIGKILL by pid. After a crash the data directory is opened again, first by a restarted process and
then in-process by a ``TestRuntime`` whose FakeClock starts after the alarm times.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import _procs
import actors_for_tests as afs
from mailbox_actors.node import Node
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.locks import DataDirLocked
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.testing import TestRuntime

pytestmark = pytest.mark.slow


@pytest.mark.anyio
async def test_second_process_on_a_data_dir_is_refused(tmp_path: Path) -> None:
    """RT-3: while one process runs a node on a data directory, another process opening it is
    refused with DataDirLocked naming the holder; once the holder dies (SIGKILL), it opens."""
    data = tmp_path / "data"
    with _procs.running("hold", data, log_path=tmp_path / "holder.log") as holder:
        line = _procs.read_line(holder)
        assert line == f"READY {holder.pid}"

        second = Node(RuntimeSettings(data_dir=str(data)), objects=afs.ALL_OBJECTS)
        with pytest.raises(DataDirLocked) as refused:
            await second.start()
        assert str(holder.pid) in str(refused.value)
        assert str(data) in str(refused.value)

        # Another process is refused the same way: it exits with DataDirLocked.
        third_log = tmp_path / "third.log"
        with _procs.running("hold", data, log_path=third_log) as third:
            assert third.wait(timeout=60) != 0
        assert "DataDirLocked" in read_text(third_log)

    # The lock died with its process: the directory opens now.
    async with TestRuntime(data, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "after-holder")
        assert await afs.scratch(rt, oid, afs.Get(k="nothing")) is None


@pytest.mark.anyio
async def test_two_nodes_in_one_process_cannot_share_a_data_dir(tmp_path: Path) -> None:
    """RT-3: a second node on the same data directory is refused even inside the same process."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS):
        other = Node(RuntimeSettings(data_dir=str(tmp_path)), clock=SystemClock(),
                     objects=afs.ALL_OBJECTS)
        with pytest.raises(DataDirLocked, match="in use"):
            await other.start()


def read_text(path: Path) -> str:
    return path.read_text()


def _parse(lines: list[str]) -> tuple[dict[str, int], dict[str, set[str]]]:
    alarms: dict[str, int] = {}
    acked: dict[str, set[str]] = {}
    for line in lines:
        kind, *rest = line.split()
        if kind == "ALARM":
            alarms[rest[0]] = int(rest[1])
        elif kind == "ACK":
            acked.setdefault(rest[0], set()).add(rest[1])
    return alarms, acked


@pytest.mark.anyio
@pytest.mark.timeout(300)
async def test_sigkill_mid_stream_loses_no_acknowledged_write_and_no_alarm(tmp_path: Path) -> None:
    """RT-11: a node SIGKILLed during concurrent writes keeps every acknowledged write, whole
    transactions only, and (AL-4) every alarm: overdue ones fire at once on the next start."""
    data = tmp_path / "data"
    actors = 4
    now = SystemClock().now_ms()
    alarm_base = now + 3_600_000  # an hour from now: none fires while the writer runs
    lines: list[str] = []
    with _procs.running("writer", data, actors, alarm_base,
                        log_path=tmp_path / "writer.log") as writer:
        while (line := _procs.read_line(writer)) != "READY":
            lines.append(line)
        acks = 0
        while acks < 400:  # well into the stream, then kill it mid-write
            line = _procs.read_line(writer)
            lines.append(line)
            acks += line.startswith("ACK ")
        rest = _procs.kill(writer)
    # Lines the child finished writing before it died are acknowledged too; a partial one is not.
    lines += rest.split("\n")[:-1]
    alarms, acked = _parse(lines)
    assert len(alarms) == actors and len(acked) == actors
    assert sum(len(v) for v in acked.values()) >= 400

    # Restart a real process on the same directory: every acknowledged write is there.
    with _procs.running("dump", data, *alarms, log_path=tmp_path / "dump.log") as dumper:
        assert dumper.wait(timeout=120) == 0, read_text(tmp_path / "dump.log")
        out = _procs.kill(dumper)
    dumps = {}
    stored_alarm = {}
    for line in out.splitlines():
        kind, oid, payload = line.split(" ", 2)
        if kind == "DUMP":
            dumps[oid] = json.loads(payload)
        elif kind == "ALARMAT":
            stored_alarm[oid] = json.loads(payload)
    for oid, keys in acked.items():
        present = set(dumps[oid]["keys"])
        assert keys <= present, f"acknowledged writes lost: {sorted(keys - present)[:5]}"
        # No half transaction: the count row moved with each item, in the same commit.
        assert dumps[oid]["total"] == len(present)
        # Writes go in order, so what is there is a prefix of the stream: no gaps.
        assert sorted(present) == [f"k{n:06d}" for n in range(len(present))]
    assert stored_alarm == alarms

    # Open it again in-process with a FakeClock past half of the alarms: those are overdue and
    # fire at once, without advancing time; the others fire when their time comes.
    ordered = sorted(alarms.items(), key=lambda kv: kv[1])
    overdue, later = ordered[: actors // 2], ordered[actors // 2:]
    start = overdue[-1][1] + 500
    async with TestRuntime(data, start_ms=start, objects=afs.ALL_OBJECTS) as rt:
        await rt.run_until_idle()
        assert rt.now_ms() == start
        assert {(s.object_id, s.scheduled_ms) for s in afs.ALARM_LOG} == set(overdue)
        assert all(s.now_ms == start for s in afs.ALARM_LOG)
        afs.ALARM_LOG.clear()

        await rt.advance(later[-1][1] - start)
        assert [(s.object_id, s.scheduled_ms) for s in afs.ALARM_LOG] == later
        assert [s.now_ms for s in afs.ALARM_LOG] == [at for _, at in later]
        for oid, _ in ordered:
            assert await afs.scratch(rt, oid, afs.GetAlarm()) is None
            assert len(await afs.scratch(rt, oid, afs.Fired())) == 1


def test_the_lock_file_names_its_holder_alone_after_a_longer_pid(tmp_path: Path) -> None:
    """RT-3 (the lock names its holder, so ``stop`` signals the right process): a data directory
    whose lock file still holds a longer pid from an earlier holder is taken with the file holding
    this process's pid and nothing after it, and ``lock_holder`` answers that pid."""
    import os

    from mailbox_actors.platform.locks import LOCK_FILE, DataDirLock, lock_holder

    tmp_path.joinpath(LOCK_FILE).write_bytes(b"123456789012\n")
    lock = DataDirLock(tmp_path)
    lock.acquire()
    try:
        assert tmp_path.joinpath(LOCK_FILE).read_bytes() == f"{os.getpid()}\n".encode()
        assert lock_holder(tmp_path) == os.getpid()
    finally:
        lock.release()
    assert lock_holder(tmp_path) is None  # released: nobody holds it
