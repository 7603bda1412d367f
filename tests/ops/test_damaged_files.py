"""Damaged files (OPS-2, REL-4): an actor file cut short is that object's ``internal_error``, never a
new empty object; a damaged control database or queue file stops ``serve`` with exit status 2 and a
message naming the file and what to do, and the file is left exactly as it was."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.queues import QueueService
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaUsage

NS = "tenant_quota"


def _zero(path: Path) -> None:
    os.truncate(path, 0)


def _half_first_page(path: Path) -> None:
    os.truncate(path, 1000)  # SQLite alone would read this as a new, empty database


def _cut_short(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _garbage_header(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(b"this is not a SQLite header, it is what a bad disk or a stray write leaves")


DAMAGES: dict[str, Callable[[Path], None]] = {
    "zero-length": _zero, "cut inside its first page": _half_first_page,
    "truncated": _cut_short, "garbage header": _garbage_header}


@pytest.mark.anyio
@pytest.mark.parametrize("damage", list(DAMAGES))
async def test_a_damaged_actor_file_is_internal_error_never_a_new_object(
        tmp_path: Path, damage: str) -> None:
    """OPS-2, REL-4: an actor file that is empty, cut short or overwritten answers internal_error
    for that actor alone; an ``init`` (any tenant's) does not take it over as a new object; the
    file is not rewritten; other actors keep working."""
    async with TestRuntime(tmp_path) as rt:
        victim, other = rt.id_from_name(NS, "acme"), rt.id_from_name(NS, "globex")
        for oid, tenant in ((victim, "acme"), (other, "globex")):
            await rt.call(NS, oid, QuotaInit(per_minute=100, per_day=1000), tenant_id=tenant)
            for i in range(30):  # enough rows that the file spans several pages
                await rt.call(NS, oid, QuotaReserve(key=f"k{i:03d}-" + "x" * 60),
                              tenant_id=tenant)
        path = rt.node.host.path_for(NS, victim)
    async with TestRuntime(tmp_path) as rt:  # restarted: every file closed and checkpointed
        DAMAGES[damage](path)
        before = path.read_bytes()
        for req, tenant in ((QuotaUsage(), "acme"),
                            (QuotaInit(per_minute=1, per_day=1), "acme"),
                            (QuotaInit(per_minute=1, per_day=1), "intruder")):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call(NS, victim, req, tenant_id=tenant)
            assert e.value.code == ErrorCode.INTERNAL_ERROR, (damage, req, e.value)
        assert path.read_bytes() == before, "the damaged file was written to"
        usage = await rt.call(NS, other, QuotaUsage(), tenant_id="globex")
        assert usage["day_used"] == 30


def test_a_new_object_file_is_whole_when_it_appears_and_private(tmp_path: Path) -> None:
    """OPS-2, OPS-5: an object's file appears at its path already holding the runtime schema (so
    a file there that lacks it is damage), with mode 0600, and no build file is left beside it."""
    async def go() -> Path:
        async with TestRuntime(tmp_path) as rt:
            oid = rt.id_from_name(NS, "acme")
            await rt.call(NS, oid, QuotaInit(per_minute=1, per_day=1), tenant_id="acme")
            return rt.node.host.path_for(NS, oid)
    path = anyio.run(go)
    assert path.read_bytes().startswith(b"SQLite format 3\x00")
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


async def _make_shared_files(data: Path) -> None:
    clock = SystemClock()
    ids = Ids(clock, SystemRng())
    async with ControlDb(data / "control.sqlite", clock=clock, ids=ids) as db:
        for i in range(40):
            await db.create_tenant((f"tenant-{i:03d}-" + "y" * 80)[:100])
    async with QueueService(data / "queues.sqlite", clock=clock, ids=ids) as q:
        for i in range(40):
            await q.send("webhooks", {"v": 1, "kind": "test", "n": i, "pad": "z" * 200})


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("name", ["control.sqlite", "queues.sqlite"])
def test_a_damaged_shared_file_stops_serve_with_status_2_and_says_what_to_do(
        tmp_path: Path, name: str, damage: str) -> None:
    """OPS-2: ``serve`` on a data directory whose control database or queue file is empty, cut
    short or overwritten exits with status 2 (so a supervisor does not restart it in a loop), says
    which file, that it is damaged, and to restore it or move it aside; the file is untouched."""
    data = tmp_path / "node"
    anyio.run(_make_shared_files, data)
    path = data / name
    DAMAGES[damage](path)
    before = path.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "mailbox_actors", "serve", "--data", str(data), "--port", "0",
         "--log-level", "warning"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert str(path) in done.stderr and "damaged" in done.stderr, done.stderr
    assert "restore it from a backup" in done.stderr and "move it aside" in done.stderr
    assert "Traceback" not in done.stderr
    assert path.read_bytes() == before


@pytest.mark.slow
def test_a_cluster_on_a_damaged_control_database_stops_instead_of_restarting(
        tmp_path: Path) -> None:
    """OPS-2: under ``cluster``, a node that finds the shared control database damaged exits 2;
    the supervisor does not restart it but stops the cluster with exit status 2, and the file is
    untouched."""
    from cluster_proc import Cluster

    data = tmp_path / "cluster"
    data.mkdir()
    (data / "control.sqlite").write_bytes(b"\x00garbage, not a database\n" * 200)
    before = (data / "control.sqlite").read_bytes()
    c = Cluster(data, 2)
    try:
        status, out = c.exit_output()
    finally:
        c.stop()
    assert status == 2, out
    assert "damaged" in out and "not restarting it" in out and "restarting in" not in out, out
    assert (data / "control.sqlite").read_bytes() == before


@pytest.mark.anyio
@pytest.mark.parametrize("damage", ["zero-length", "garbage header", "truncated"])
async def test_a_damaged_alarm_index_is_set_aside_and_rebuilt_from_the_actor_files(
        tmp_path: Path, damage: str) -> None:
    """OPS-2, AL-4: the alarm index is derived from the actor files, so a damaged one does not
    stop the node (a restart would fail the same way): it is moved aside, kept, and rebuilt by a
    scan; every actor's alarm is pending again."""
    async with TestRuntime(tmp_path) as rt:
        for name in ("acme", "globex", "initech"):
            await rt.call(NS, rt.id_from_name(NS, name), QuotaInit(per_minute=1, per_day=1),
                          tenant_id=name)
        index = rt.node.settings.path / "alarms.sqlite"
    if damage == "truncated":
        _pad(index)  # several pages, so that cutting it short is detectable
    DAMAGES[damage](index)
    before = index.read_bytes()
    async with TestRuntime(tmp_path) as rt:
        assert rt.node.alarm_book.pending_count == 3
        kept = [p for p in index.parent.iterdir() if p.name.startswith("alarms.sqlite.damaged-")]
        assert [p.read_bytes() for p in kept if not p.name.endswith(("-wal", "-shm"))] == [before]


def _pad(path: Path) -> None:
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE pad (x)")
        db.executemany("INSERT INTO pad VALUES (?)", [("p" * 500,)] * 100)


def _damage_alarm_table(path: Path) -> None:
    """Overwrite the root page of the runtime's alarm table alone: the file opens and its other
    tables read, but the stored alarm cannot be read."""
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = '_ma_alarm'").fetchone()
        size = db.execute("PRAGMA page_size").fetchone()[0]
    with open(path, "r+b") as f:
        f.seek((root[0] - 1) * size)
        f.write(b"\xff" * size)  # not a b-tree page


@pytest.mark.anyio
async def test_a_damaged_alarm_table_fails_no_other_actor_and_stops_no_eviction(
        tmp_path: Path) -> None:
    """REL-4, RT-9: an actor whose stored alarm cannot be read (its alarm table's page damaged)
    fails no other actor's call: with the bound of open actors reached, other actors still
    activate (it is evicted for them), and idle eviction goes on for every other actor."""
    names = ("acme", "globex", "initech")
    async with TestRuntime(tmp_path) as rt:
        for name in names:
            await rt.call(NS, rt.id_from_name(NS, name), QuotaInit(per_minute=100, per_day=1000),
                          tenant_id=name)
        victim = rt.id_from_name(NS, "acme")
        path = rt.node.host.path_for(NS, victim)
    _damage_alarm_table(path)
    async with TestRuntime(tmp_path, max_active_actors=1) as rt:
        with contextlib.suppress(MailboxActorsError):  # its own call may answer internal_error
            await rt.call(NS, victim, QuotaUsage(), tenant_id="acme")
        for name in names[1:]:  # each past the bound of one open actor
            usage = await rt.call(NS, rt.id_from_name(NS, name), QuotaUsage(), tenant_id=name)
            assert usage["day_used"] == 0
    async with TestRuntime(tmp_path) as rt:
        with contextlib.suppress(MailboxActorsError):
            await rt.call(NS, victim, QuotaUsage(), tenant_id="acme")
        await rt.call(NS, rt.id_from_name(NS, "globex"), QuotaUsage(), tenant_id="globex")
        await rt.advance(rt.settings.idle_ms + 1_000)
        assert rt.node.host.active_count == 0, "an idle actor was kept open"


@pytest.mark.anyio
async def test_an_actor_file_without_its_alarm_table_is_internal_error(tmp_path: Path) -> None:
    """REL-4, OPS-2: a file that lost the runtime's alarm table (outside damage: actor SQL cannot
    drop it) answers internal_error at the alarm's first use, as a damaged file does, not a
    retryable unavailable."""
    import sqlite3

    import actors_for_tests as afs

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        path = rt.node.host.path_for(afs.Scratch.namespace, oid)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE _ma_alarm")
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        with pytest.raises(MailboxActorsError) as e:
            await afs.scratch(rt, oid, afs.GetAlarm())
        assert e.value.code == ErrorCode.INTERNAL_ERROR
