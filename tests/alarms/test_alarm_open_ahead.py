"""An alarm on an evicted actor opens its file ahead, in a worker thread (AL-4, RT-3, RT-9, OPS-2,
OPS-4): the alarm runs once on one activation, no second connection outlives the open, an actor
activated meanwhile keeps its own connection, and a missing or damaged file is left as it is.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

import actors_for_tests as afs
from mailbox_actors.platform.storage import wal_index
from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.opening import connect_ahead
from mailbox_actors.platform.storage.sql import RUNTIME_SCHEMA_VERSION
from mailbox_actors.runtime.activation import META_KEYS
from mailbox_actors.runtime.file_threads import FileThreads
from mailbox_actors.testing import TestRuntime
from old_layout import table_rows, to_previous_layout


def _opening_ahead(rt: TestRuntime) -> None:
    """The node's opens on the loop seen waiting for the disk: it opens files ahead (a node
    starts opening on the loop)."""
    rt.node.host._files.opened_on_loop(wall_s=0.010, busy_s=0.0)


def _descriptors_on(path: Path) -> int:
    """Descriptors this process holds on ``path``, its ``-wal`` and its ``-shm``."""
    fd_dir = Path("/proc/self/fd")
    held = 0
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        held += target.startswith(str(path))
    return held


@pytest.mark.anyio
async def test_an_alarm_on_an_evicted_actor_runs_once_on_one_connection(tmp_path: Path) -> None:
    """AL-4, RT-9, RT-11, OPS-4: the evicted actor's alarm opens its file (ahead, in a thread,
    then on the loop) once, runs once, stores its write, and leaves one connection open: the
    database, its log and its -shm, nothing more; evicted again, that connection is closed in a
    thread, and the node's stop waits for it: nothing is held after."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=4) as rt:
        host = rt.node.host
        _opening_ahead(rt)
        oid = await afs.new_scratch(rt, "evicted", alarm_at=rt.now_ms() + 5_000)
        host.evict_all_idle()
        path = host.path_for("scratch", oid)
        assert _descriptors_on(path) == 0
        activations = host.activations
        await rt.advance(5_000)
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
        assert host.activations == activations + 1
        assert host.is_active("scratch", oid)
        assert _descriptors_on(path) == 3
        fired = await rt.run_in_actor("scratch", oid, lambda _actor, sql: sql.exec(
            "SELECT count(*) FROM fired").one()[0])
        assert fired == 1
        host.evict_all_idle()  # its connection is closed behind, in a thread
    assert _descriptors_on(path) == 0  # the node's stop waited for it


@pytest.mark.anyio
async def test_an_alarm_cancelled_while_it_waits_for_its_turn_leaves_no_connection(
        tmp_path: Path) -> None:
    """AL-4, RT-11, issue 28: an evicted actor's file opened ahead for its alarm waits for the
    scheduler's turn before its activation; cancelled there (a node stopping), the connection
    made ahead is closed (and counted closed, ``wal_index``), the actor is not activated and
    its alarm did not run."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=4) as rt:
        host = rt.node.host
        _opening_ahead(rt)
        oid = await afs.new_scratch(rt, "evicted", alarm_at=rt.now_ms() + 5_000)
        host.evict_all_idle()
        path = host.path_for("scratch", oid)
        waiting = anyio.Event()

        async def turn() -> None:  # a turn that never comes
            waiting.set()
            await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            tg.start_soon(host.fire_alarm, ("scratch", oid), 0, True, turn)
            await waiting.wait()
            assert _descriptors_on(path) == 3  # the connection made ahead, waiting
            tg.cancel_scope.cancel()
        assert _descriptors_on(path) == 0
        assert not host.is_active("scratch", oid)
        assert afs.ALARM_LOG == []
        # The connection nobody took was counted closed (``wal_index``: else the file's index
        # would never be emptied again in this process).
        assert wal_index.key(path) not in wal_index._open_here


@pytest.mark.anyio
async def test_an_actor_activated_while_its_file_was_opened_ahead_keeps_its_connection(
        tmp_path: Path) -> None:
    """RT-3, OPS-4: when a request activated the actor while its alarm's file was being opened
    ahead, the activation stands and the connection made ahead is closed: SQLite keeps at most
    its database descriptor until the activation's own connection closes (closing it sooner
    would drop the activation's file locks), and then nothing is held."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=4) as rt:
        host = rt.node.host
        oid = await afs.new_scratch(rt, "busy")
        act = host.activate(afs.Scratch, oid, create=False)
        path = host.path_for("scratch", oid)
        ahead = connect_ahead(path, Durability.NORMAL, Limits(), META_KEYS)
        assert ahead is not None
        assert _descriptors_on(path) > 3
        assert host.activate(afs.Scratch, oid, create=False, ahead=ahead) is act
        assert _descriptors_on(path) <= 4
        with pytest.raises(Exception, match="closed"):
            ahead.conn.execute("SELECT 1")
        assert await rt.call("scratch", oid, afs.Get(k="k"), tenant_id=afs.TENANT) is None
        host.evict_all_idle()
        assert _descriptors_on(path) == 0


def test_opening_ahead_leaves_a_missing_or_damaged_file_as_it_is(tmp_path: Path) -> None:
    """OPS-2, REL-4: opening ahead never creates a file for an unknown id, and leaves a damaged
    one untouched (no log or -shm made beside it): the open on the event loop reports it."""
    missing = tmp_path / "missing.sqlite"
    assert connect_ahead(missing, Durability.NORMAL, Limits(), META_KEYS) is None
    assert list(tmp_path.iterdir()) == []
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database, " * 64)
    assert connect_ahead(damaged, Durability.NORMAL, Limits(), META_KEYS) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.sqlite"]
    assert damaged.read_bytes() == b"not a database, " * 64


@pytest.mark.anyio
async def test_an_evicted_actor_of_the_previous_layout_is_upgraded_by_its_alarm(
        tmp_path: Path) -> None:
    """RT-14, AL-4: opening ahead leaves a file of runtime schema 1 to the open on the loop,
    which upgrades it; the alarm the file holds fires once and the file is of schema 2 after."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "old", alarm_at=rt.now_ms() + 60_000)
        path = rt.node.host.path_for("scratch", oid)
    to_previous_layout(path)
    assert connect_ahead(path, Durability.NORMAL, Limits(), META_KEYS) is None
    assert table_rows(path, "PRAGMA user_version") == [(1,)]
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=4) as rt:
        await rt.advance(60_000)
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
    assert table_rows(path, "PRAGMA user_version") == [(RUNTIME_SCHEMA_VERSION,)]


def test_files_are_opened_ahead_only_while_opens_on_the_loop_wait_for_the_disk() -> None:
    """AL-5, RT-9: a node opens evicted actors' files ahead (in threads) while its opens on the
    loop wait for the disk, and on the loop once they stop waiting (a quiet disk, where the
    threads' hand-offs would cost more than they save). It starts on the loop, its first open
    timed; on the loop one open in eight is timed (a timing is four system calls)."""
    files = FileThreads(4)
    assert files.enabled and files.idle
    assert not files.ahead_pays() and files.timing  # the first open: on the loop, timed
    timings = []
    for _ in range(16):
        assert not files.ahead_pays()
        timings.append(files.timing)
    assert timings.count(True) == 2 and timings[7]  # the 9th open and the 17th
    files.opened_on_loop(wall_s=0.0004, busy_s=0.0004)  # waited for nothing
    files.opened_on_loop(wall_s=0.0005, busy_s=0.0004)
    assert not any(files.ahead_pays() for _ in range(1000))
    files.opened_on_loop(wall_s=0.0090, busy_s=0.0004)  # a busy disk: 8.6 ms of waiting
    pays = [files.ahead_pays() for _ in range(256)]
    # Ahead until a sample is due, then on the loop until an open there is timed again.
    assert pays[0] and not pays[-1] and pays == sorted(pays, reverse=True)
    assert files.timing  # the sample's opens on the loop are timed
    files.opened_on_loop(wall_s=0.0090, busy_s=0.0004)
    assert files.ahead_pays()
    assert not FileThreads(0).enabled


def test_an_opens_own_cpu_time_is_never_taken_for_the_disks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """AL-5, RT-9: the loop thread's time on a CPU is the thread's CPU clock, and only the run
    queue's wait comes from schedstat: its own CPU field moves only at a tick or a switch, and
    missed up to a tick (4 ms) of an open's own CPU, which then read as waiting for the disk and
    could turn opening ahead on (review R3). Fed a schedstat whose CPU field lags, busy_s reads
    the CPU clock and the queue's wait alone."""
    files = FileThreads(4)
    files.busy_s()  # the descriptor opened
    assert files._run_queue is not None and files._run_queue.fd >= 0  # Linux's schedstat
    cpu = [1.000]
    monkeypatch.setattr(time, "thread_time", lambda: cpu[0])
    monkeypatch.setattr(os, "pread", lambda fd, n, at: b"900000000 250000000 7\n")
    before = files.busy_s()
    cpu[0] += 0.004  # 4 ms on a CPU that the lagging field has not seen
    assert files.busy_s() - before == pytest.approx(0.004)
    assert before == pytest.approx(1.000 + 0.250)
    monkeypatch.undo()
    files.stop()
    files.join(5.0)


def test_an_opens_wait_excludes_the_time_the_loop_thread_was_queued_for_a_cpu() -> None:
    """AL-5, RT-9: what an open on the loop waited for the disk is its wall time less the loop
    thread's time on a CPU and in the run queue (schedstat: a machine busy with other processes
    is not a slow disk); the descriptor that reads it is the host's until the threads stop."""
    files = FileThreads(4)
    readings = [files.busy_s() for _ in range(100)]
    assert readings == sorted(readings) and readings[0] > 0
    assert files._run_queue is not None
    fd = files._run_queue.fd
    if fd >= 0:
        assert os.readlink(f"/proc/self/fd/{fd}").endswith("/schedstat")
    files.stop()
    files.join(5.0)
    if fd >= 0:
        assert not os.path.exists(f"/proc/self/fd/{fd}") or \
            not os.readlink(f"/proc/self/fd/{fd}").endswith("/schedstat")
