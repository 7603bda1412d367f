"""An alarm handler that re-arms its alarm in its own transaction and returns (what a burst's
handlers do, settled as soon as that first step ends: ``alarm_runs.start``) (AL-2, AL-3, AL-4,
AL-7): each run of an instant fires once, its writes and its new alarm committed, the new time
in the book and the node's index and ``get_alarm()``; one whose transaction SQLite refused keeps
its alarm, retried, while the others are done."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

import actors_for_tests as afs
from mailbox_actors.testing import TestRuntime

NS = "scratch"
LATER_MS = 60_000


def items_in_file(path: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT k, v FROM items ORDER BY k").fetchall()


async def _rearms(actor: afs.Scratch, info: object) -> None:
    def run(tx: object) -> None:
        actor.sql.exec("INSERT OR REPLACE INTO items (k, v) VALUES ('x', '1')")
        actor.sql.set_alarm(actor.sql.now_ms() + LATER_MS)
    actor.sql.transaction_sync(run)


async def _rearms_then_fails(actor: afs.Scratch, info: object) -> None:
    def run(tx: object) -> None:
        actor.sql.exec("INSERT OR REPLACE INTO items (k, v) VALUES ('x', '1')")
        actor.sql.set_alarm(actor.sql.now_ms() + LATER_MS)
        raise ValueError("the transaction is rolled back, its new alarm with it")
    actor.sql.transaction_sync(run)


@pytest.mark.anyio
async def test_alarms_rearmed_in_their_own_transaction_are_done_at_their_new_time(
        tmp_path: Path) -> None:
    """AL-3, AL-4, AL-7: three alarms due at one instant, each handler writing a row and moving
    its alarm a minute on in one transaction: each fired once, its row written, and its alarm the
    new time in its file, the book and the index; the middle one's transaction raised (rolled
    back): no row, its alarm still the fired one in its file and the index, retried. A fourth,
    whose handler writes in a transaction without re-arming, is done and its alarm gone. The next
    minute the re-armed ones fire again at their new time."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        at = rt.now_ms() + 1_000
        ids = [await afs.new_scratch(rt, name, alarm_at=at) for name in ("a", "b", "c", "d")]
        afs.ALARM_HOOKS[ids[0]] = _rearms
        afs.ALARM_HOOKS[ids[1]] = _rearms_then_fails
        afs.ALARM_HOOKS[ids[2]] = _rearms
        sched = rt.node.scheduler
        index = rt.node.alarm_book.index
        assert sched is not None and index is not None
        fired = sched.fired
        await rt.advance(1_000)
        assert sorted(s.object_id for s in afs.ALARM_LOG) == sorted(ids)
        assert sched.fired == fired + 3
        sched.flush_index()
        indexed = index.load()
        for oid in (ids[0], ids[2]):
            key = (NS, oid)
            assert items_in_file(rt.node.host.path_for(*key)) == [("x", "1")]
            assert await afs.scratch(rt, oid, afs.GetAlarm()) == at + LATER_MS
            assert sched.pending(key) == at + LATER_MS and sched.retry_count(key) == 0
            assert indexed.get(key) == at + LATER_MS
        failed = (NS, ids[1])
        assert items_in_file(rt.node.host.path_for(*failed)) == []
        assert await afs.scratch(rt, ids[1], afs.GetAlarm()) == at
        retry_at = sched.pending(failed)
        assert retry_at is not None and at < retry_at < at + LATER_MS
        assert sched.retry_count(failed) == 1
        assert indexed.get(failed) == at
        once = (NS, ids[3])  # Scratch's own handler: a row in ``fired``, no new alarm
        assert await afs.scratch(rt, ids[3], afs.GetAlarm()) is None
        assert sched.pending(once) is None and once not in indexed

        afs.ALARM_HOOKS[ids[1]] = _rearms  # its retry goes well
        afs.ALARM_LOG.clear()
        await rt.advance(LATER_MS)
        assert sorted((s.object_id, s.retry_count) for s in afs.ALARM_LOG) == sorted(
            [(ids[0], 0), (ids[1], 1), (ids[2], 0)])
        assert await afs.scratch(rt, ids[1], afs.GetAlarm()) == retry_at + LATER_MS
