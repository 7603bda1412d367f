"""What an alarm run acknowledges (AL-3, AL-4, RT-4): among alarms due at one instant, each is taken
off the scheduler's book and the node's index only once its own actor's writes committed; a run whose
writes SQLite rolled back keeps its alarm, retried, while the others of the same instant are done."""

from __future__ import annotations

from pathlib import Path

import pytest

import actors_for_tests as afs
from mailbox_actors.testing import TestRuntime

NS = "scratch"


@pytest.mark.anyio
async def test_an_instants_alarms_are_acknowledged_each_after_its_own_commit(
        tmp_path: Path) -> None:
    """AL-3, AL-4, RT-4: three alarms due at one instant, the middle one's implicit writes rolled
    back by SQLite: the other two runs commit their writes and are done (no alarm stored, none in
    the book, none in the index after its flush); the middle one is not acknowledged: its alarm
    stays stored, in the book for a retry (retry_count 1) and in the index, and nothing of its
    writes is in its file. Its retry then commits and is done."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        at = rt.now_ms() + 1_000
        ids = [await afs.new_scratch(rt, name, alarm_at=at) for name in ("a", "b", "c")]
        afs.ALARM_HOOKS[ids[0]] = afs.writes_implicitly
        afs.ALARM_HOOKS[ids[1]] = afs.writes_then_loses_them
        afs.ALARM_HOOKS[ids[2]] = afs.writes_implicitly
        sched = rt.node.scheduler
        assert sched is not None
        await rt.advance(1_000)
        assert sorted(s.object_id for s in afs.ALARM_LOG) == sorted(ids)
        index = rt.node.alarm_book.index
        assert index is not None
        sched.flush_index()
        indexed = index.load()
        for oid in (ids[0], ids[2]):
            assert afs.items_in_file(rt.node.host.path_for(NS, oid)) == [("x", "1")]
            assert await afs.scratch(rt, oid, afs.GetAlarm()) is None
            assert sched.pending((NS, oid)) is None
            assert (NS, oid) not in indexed
        failed = (NS, ids[1])
        assert afs.items_in_file(rt.node.host.path_for(*failed)) == []
        assert await afs.scratch(rt, ids[1], afs.GetAlarm()) == at
        retry_at = sched.pending(failed)
        assert retry_at is not None and retry_at > at and sched.retry_count(failed) == 1
        assert indexed.get(failed) == at  # the index may only be early: it keeps the alarm

        afs.ALARM_HOOKS[ids[1]] = afs.writes_implicitly  # the retry goes well
        await rt.advance(retry_at - rt.now_ms())
        assert [(s.object_id, s.retry_count) for s in afs.ALARM_LOG][-1] == (ids[1], 1)
        assert afs.items_in_file(rt.node.host.path_for(*failed)) == [("x", "1")]
        assert await afs.scratch(rt, ids[1], afs.GetAlarm()) is None
        assert sched.pending(failed) is None


@pytest.mark.anyio
async def test_a_run_that_cannot_start_is_a_failed_run_retried_and_the_others_fire(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AL-3: if starting an open actor's run fails unexpectedly (a bug guard of the scheduler's
    batch path), that alarm is not acknowledged: it stays stored and comes back as a retry, and
    the other alarms of the instant still fire."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        at = rt.now_ms() + 1_000
        ids = [await afs.new_scratch(rt, name, alarm_at=at) for name in ("a", "b")]
        host = rt.node.host
        begin = host.begin_alarm

        def refusing(key: tuple[str, str], retry_count: int, now_ms: int) -> object:
            if key == (NS, ids[0]) and retry_count == 0:
                raise RuntimeError("a bug")
            return begin(key, retry_count, now_ms)

        monkeypatch.setattr(host, "begin_alarm", refusing)
        sched = rt.node.scheduler
        assert sched is not None
        await rt.advance(1_000)
        assert [s.object_id for s in afs.ALARM_LOG] == [ids[1]]
        failed = (NS, ids[0])
        assert await afs.scratch(rt, ids[0], afs.GetAlarm()) == at
        retry_at = sched.pending(failed)
        assert retry_at is not None and retry_at > at and sched.retry_count(failed) == 1
        await rt.advance(retry_at - rt.now_ms())
        assert [(s.object_id, s.retry_count) for s in afs.ALARM_LOG][-1] == (ids[0], 1)
        assert await afs.scratch(rt, ids[0], afs.GetAlarm()) is None
