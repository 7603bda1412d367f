"""The alarm index checked after the first answer (issue 28 item 4; AL-4, OPS-2): ``serve`` opens
its index trusting it and answers; the index's quick check runs once the node answered, on a
worker thread. A damaged index found then is set aside (kept) and rebuilt: the alarms set
meanwhile are written to the fresh index, a scan of the actor files adds the rest, and every alarm
still fires: late, never lost."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.node.alarm_index import check_file, incomplete_marker
from mailbox_actors.node.node import Node
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.runtime.settings import RuntimeSettings
from serve_proc import serving


def _settings(tmp_path: Path) -> RuntimeSettings:
    data = tmp_path / "data"
    return RuntimeSettings(data_dir=str(data), control_db=str(data / "control.sqlite"),
                           queues_db=str(data / "queues.sqlite"))


def _hour_ahead() -> int:
    return time.time_ns() // 1_000_000 + 3_600_000


class HeldCheck:
    """The node's index check, held until the test releases it; then ``answer(path)``."""

    def __init__(self, answer: Callable[[Path], str | None]) -> None:
        self.answer = answer
        self.started = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()

    def __call__(self, path: Path) -> str | None:
        self.started.set()
        assert self.release.wait(60), "never released"
        try:
            return self.answer(path)
        finally:
            self.done.set()


@pytest.mark.anyio
async def test_the_node_answers_before_its_index_is_checked_and_damage_found_after_loses_no_alarm(
        tmp_path: Path) -> None:
    """AL-4, OPS-2: a served node answers calls, one setting an alarm, while its index's check is
    still running; the check then finds the index damaged: it is set aside, the fresh index holds
    the alarm set meanwhile and (by the scan) those of the actor files, and an overdue one of
    them fires."""
    settings = _settings(tmp_path)
    async with Node(settings, clock=FakeClock(), objects=afs.ALL_OBJECTS) as first:
        # The fake clock stands in 2026-01-01: this alarm is long overdue on the system clock,
        # and the fake one never moves, so it cannot fire before the restart.
        soon = await afs.new_scratch(first, "soon", alarm_at=first.clock.now_ms() + 1_000)
        later_at = _hour_ahead()
        later = await afs.new_scratch(first, "later", alarm_at=later_at)
    path = settings.path / "alarms.sqlite"
    check = HeldCheck(lambda _path: "damage the check found (this test's)")
    fired = anyio.Event()

    async def on_alarm(_actor: Any, _info: Any) -> None:
        fired.set()

    afs.ALARM_HOOKS[soon] = on_alarm
    node = Node(settings, objects=afs.ALL_OBJECTS, answer_first=True, alarm_index_check=check)
    try:
        async with node:
            meanwhile_at = _hour_ahead()
            meanwhile = await afs.new_scratch(node, "meanwhile", alarm_at=meanwhile_at)
            node.answered()
            assert await anyio.to_thread.run_sync(check.started.wait, 60)
            assert not check.done.is_set()
            assert not node.alarms_loaded.is_set()
            assert ("scratch", soon) not in node.alarm_book.entries  # the index's rows wait
            assert not fired.is_set()
            check.release.set()
            with anyio.fail_after(60):  # a bound on a hang, not a timing
                await node.alarms_loaded.wait()
                await fired.wait()
            rows = AlarmIndex.read(path)
            assert rows[("scratch", meanwhile)] == meanwhile_at  # written when the book took it
            assert rows[("scratch", later)] == later_at  # found by the scan
            assert not incomplete_marker(path).exists()
        assert [p for p in path.parent.iterdir() if p.name.startswith("alarms.sqlite.damaged-")]
        assert not node.failed.is_set()
    finally:
        check.release.set()
        afs.reset_state()


@pytest.mark.anyio
async def test_a_sound_index_checked_after_the_answer_is_read_as_before(tmp_path: Path) -> None:
    """AL-4: the check after the first answer finds a sound index sound: its rows are read, no
    scan, nothing set aside."""
    settings = _settings(tmp_path)
    async with Node(settings, clock=FakeClock(), objects=afs.ALL_OBJECTS) as first:
        later_at = _hour_ahead()
        later = await afs.new_scratch(first, "later", alarm_at=later_at)
    check = HeldCheck(check_file)
    node = Node(settings, objects=afs.ALL_OBJECTS, answer_first=True, alarm_index_check=check)
    try:
        async with node:
            node.answered()
            check.release.set()
            with anyio.fail_after(60):
                await node.alarms_loaded.wait()
            assert check.done.is_set()
            assert node.alarm_book.entries[("scratch", later)].at == later_at
            assert not [p for p in settings.path.iterdir() if "damaged" in p.name]
    finally:
        check.release.set()


def _damaged_index(path: Path, n: int) -> None:
    """An index of ``n`` far-off alarms with a b-tree page in the middle overwritten: its header
    is sound (the start's header check passes), its quick check is not."""
    index = AlarmIndex(path)
    at = _hour_ahead()
    index.apply({("ns", f"{i:064x}"): at for i in range(n)})
    index.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
    with open(path, "r+b") as f:
        f.seek((pages // 2) * size)
        f.write(b"\xff" * size)
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):  # the check itself stops
        check_file(path)


def test_serve_answers_before_it_finds_its_index_damaged(tmp_path: Path) -> None:
    """AL-4, OPS-2: ``serve`` on a directory whose index is damaged inside says where it listens
    and answers ``/healthz`` before it says the index was damaged (it checked it after its first
    answer); the file is set aside, kept, and the rebuilt index is complete again."""
    data = tmp_path / "node"
    data.mkdir()
    _damaged_index(data / "alarms.sqlite", 2_000)
    with serving(data) as lines:  # up to its start's last line, "operator token in"
        listening = next(line for line in lines.seen if "listening on http://" in line)
        url = listening.split("listening on ")[1].split(" ")[0]
        with urllib.request.urlopen(url + "/healthz", timeout=60) as reply:
            assert reply.status == 200
        if not any("alarm index was damaged" in line for line in lines.seen):
            lines.until("the alarm index was damaged")
        said = lines.until("the alarm index is rebuilt")
        assert any("being rebuilt" in line for line in said + lines.seen)
        seen = lines.seen
        first_damage = next(i for i, line in enumerate(seen) if "alarm index was damaged" in line)
        assert seen.index(listening) < first_damage
    kept = [p for p in data.iterdir() if p.name.startswith("alarms.sqlite.damaged-")
            and not p.name.endswith(("-wal", "-shm"))]
    assert len(kept) == 1
    assert not incomplete_marker(data / "alarms.sqlite").exists()
    assert check_file(data / "alarms.sqlite") is None
