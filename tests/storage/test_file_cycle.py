"""How an actor's file is opened and closed (RT-2, RT-9, RT-11; ADR 0012): closing keeps the
write-ahead log for the next open instead of checkpointing it, and nothing committed is lost by
that, in a crash or otherwise; a log past its bound is checkpointed on close; a removed object
leaves no log behind.

The crash tests run real node processes (``_procs.py``) killed with SIGKILL by pid while they
write, on a bound of open actors below the number writing, so files are closed and reopened all
the time; a restarted process then reads every acknowledged write back.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

import _procs
import actors_for_tests as afs
from mailbox_actors.platform import sqlite_files
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.storage import handle
from mailbox_actors.platform.storage.sql import RUNTIME_SCHEMA_VERSION
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.quota import QuotaInit, QuotaUsage

NS = "tenant_quota"


def _logs(data: Path) -> list[Path]:
    return sorted((data / "actors").rglob("*.sqlite-wal"))


def test_the_page_cache_setting_reached_sqlite() -> None:
    """ADR 0012: the package set SQLite's page cache before SQLite initialised (the memory per
    open actor depends on it), and reaches the library the sqlite3 module uses."""
    assert handle.page_cache_configured()


@pytest.mark.anyio
async def test_an_evicted_actor_keeps_its_log_and_reopens_with_every_write(tmp_path: Path) -> None:
    """RT-2, RT-9: eviction closes the file without a checkpoint (the log stays beside it), and
    the reactivated actor reads every write it committed, explicit and implicit."""
    async with TestRuntime(tmp_path, idle_ms=1_000, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "keeps-log")
        for n in range(6):  # a few pages of log, well under its bound
            await afs.scratch(rt, oid, afs.Put(k=f"k{n:02d}", v=f"v{n}", tx=n % 2 == 0))
        path = rt.node.host.path_for("scratch", oid)
        await rt.advance(2_000)
        assert not rt.node.host.is_active("scratch", oid)
        wal = path.with_name(path.name + "-wal")
        assert wal.exists() and wal.stat().st_size > 0  # closed without checkpointing
        state = await afs.scratch(rt, oid, afs.Dump())
        assert state["keys"] == [f"k{n:02d}" for n in range(6)]
        assert state["total"] == 6


@pytest.mark.anyio
async def test_a_log_past_its_bound_is_checkpointed_when_the_file_closes(tmp_path: Path) -> None:
    """ADR 0012: files on disk stay bounded: a log grown past WAL_KEEP_BYTES is folded into the
    database on close (and removed), and the data is all there after."""
    async with TestRuntime(tmp_path, idle_ms=1_000, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "big-log")
        big = "x" * 8_000
        n = handle.WAL_KEEP_BYTES // 8_000 + 8
        for i in range(n):
            await afs.scratch(rt, oid, afs.Put(k=f"k{i:03d}", v=big))
        path = rt.node.host.path_for("scratch", oid)
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size > handle.WAL_KEEP_BYTES
        await rt.advance(2_000)
        assert not rt.node.host.is_active("scratch", oid)
        assert not wal.exists() or wal.stat().st_size == 0
        state = await afs.scratch(rt, oid, afs.Dump())
        assert len(state["keys"]) == n


def _acked(lines: list[str]) -> dict[str, set[str]]:
    acked: dict[str, set[str]] = {}
    for line in lines:
        kind, *rest = line.split(" ")
        if kind == "ACK":
            acked.setdefault(rest[0], set()).add(rest[1])
    return acked


@pytest.mark.anyio
@pytest.mark.timeout(300)
@pytest.mark.parametrize("durability", ["normal", "full"])
async def test_sigkill_while_files_close_and_reopen_loses_no_acknowledged_write(
        tmp_path: Path, durability: str) -> None:
    """RT-2, RT-11: a node SIGKILLed mid-write, with 4 actors writing through a bound of 2 open
    actors (every few writes a file is closed keeping its log, and opened again), keeps every
    acknowledged write, whole transactions only, in order; the restarted node opens every file,
    logs left un-checkpointed included."""
    data = tmp_path / "data"
    actors = 4
    alarm_base = SystemClock().now_ms() + 3_600_000  # none fires while it runs
    lines: list[str] = []
    with _procs.running("writer", data, actors, alarm_base, durability, 2,
                        log_path=tmp_path / "writer.log") as writer:
        while (line := _procs.read_line(writer)) != "READY":
            lines.append(line)
        acks = 0
        while acks < 300:
            line = _procs.read_line(writer)
            lines.append(line)
            acks += line.startswith("ACK ")
        rest = _procs.kill(writer)
    lines += rest.split("\n")[:-1]  # complete lines written before it died are acknowledged too
    acked = _acked(lines)
    assert len(acked) == actors
    assert _logs(data), "the crash should leave logs that were never checkpointed"

    ids = sorted(acked)
    with _procs.running("dump", data, *ids, log_path=tmp_path / "dump.log") as dumper:
        assert dumper.wait(timeout=120) == 0, (tmp_path / "dump.log").read_text()
        out = _procs.kill(dumper)
    dumps = {oid: json.loads(payload) for kind, oid, payload in
             (line.split(" ", 2) for line in out.splitlines()) if kind == "DUMP"}
    for oid, keys in acked.items():
        present = set(dumps[oid]["keys"])
        assert keys <= present, f"acknowledged writes lost: {sorted(keys - present)[:5]}"
        assert dumps[oid]["total"] == len(present)  # no half transaction
        assert sorted(present) == [f"k{n:06d}" for n in range(len(present))]


def test_the_open_time_header_check_reads_a_short_file_with_its_log_as_whole(
        tmp_path: Path) -> None:
    """OPS-2, RT-2: opening checks a file's header with one descriptor. A file shorter than its
    header says is damage only without a log holding pages beside it (a crash in a checkpoint
    leaves it short until SQLite replays the log, and it must still open); a missing file says so
    (the opener then creates or answers not found); a whole file passes."""
    path = tmp_path / "a.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (v TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,) for _ in range(40)])
    conn.commit()
    conn.close()
    assert sqlite_files.examine(str(path)) is None
    os.truncate(path, path.stat().st_size // 2)
    assert "truncated" in (sqlite_files.examine(str(path)) or "")
    assert sqlite_files.damage_of(path) == sqlite_files.examine(str(path))
    wal = path.with_name(path.name + "-wal")
    wal.write_bytes(b"\0" * 32)  # what the log's size says is all the check reads of it
    assert sqlite_files.examine(str(path)) is None
    wal.write_bytes(b"")
    assert "truncated" in (sqlite_files.examine(str(path)) or "")
    with pytest.raises(FileNotFoundError):
        sqlite_files.examine(str(tmp_path / "missing.sqlite"))
    assert (sqlite_files.damage_of(tmp_path / "missing.sqlite") or "").startswith("unreadable")


@pytest.mark.anyio
@pytest.mark.parametrize("layout", ["same", "changed"])
async def test_a_file_of_a_newer_runtime_schema_is_refused_not_read(tmp_path: Path,
                                                                    layout: str) -> None:
    """RT-14, REL-4: opening reads the alarm and meta in its first statement and then checks the
    runtime schema version; a file from a newer runtime (user_version past what this code knows)
    is internal_error for that actor, not opened as if this code understood it, also when the
    newer runtime changed the runtime tables' layout so that first read fails (not a retryable
    unavailable: retrying cannot help)."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name(NS, "acme")
        await rt.call(NS, oid, QuotaInit(per_minute=100, per_day=1000), tenant_id="acme")
        path = rt.node.host.path_for(NS, oid)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {RUNTIME_SCHEMA_VERSION + 1}")
    if layout == "changed":
        conn.execute("ALTER TABLE _ma_alarm RENAME COLUMN at_ms TO due_at_ms")
    conn.close()
    async with TestRuntime(tmp_path) as rt:
        with pytest.raises(MailboxActorsError) as e:
            await rt.call(NS, oid, QuotaUsage(), tenant_id="acme")
        assert e.value.code == ErrorCode.INTERNAL_ERROR
