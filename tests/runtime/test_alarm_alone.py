"""An actor opened on the loop for its alarm alone is run the way an open actor's alarm is (AL-3,
AL-4, RT-3, RT-9, issue 28): its handler's first step at once, no run coroutine of the host's;
each alarm is acknowledged only after its own actor's writes committed, one whose writes SQLite
rolled back is retried, a request that reaches the actor while its handler waits is served and
keeps it open, and the actors opened for their alarm alone are closed after their runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from mailbox_actors.runtime import alarm_runs
from mailbox_actors.testing import TestRuntime

NS = "scratch"


def _only_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's whole-way run (``alarm_runs.run``) fails the test if it is taken."""
    def whole_way(*_args: Any, **_kw: Any) -> Any:
        raise AssertionError("an alarm-only wake went the whole way")
    monkeypatch.setattr(alarm_runs, "run", whole_way)


@pytest.mark.anyio
@pytest.mark.parametrize("file_threads", [0, 2])
async def test_evicted_actors_alarms_are_acknowledged_each_after_its_own_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_threads: int) -> None:
    """AL-3, AL-4, RT-4: three evicted actors due at one instant, the middle one's implicit writes
    rolled back by SQLite: the other two runs commit their writes and are done (nothing stored,
    nothing in the book); the middle one keeps its alarm, retried, and nothing of its writes is
    in its file; each actor is opened once, and one whose run was done while others waited is
    closed after it. Its retry then commits and is done."""
    _only_alone(monkeypatch)
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=file_threads,
                           alarm_concurrency=1) as rt:
        host = rt.node.host
        sched = rt.node.scheduler
        assert sched is not None
        at = rt.now_ms() + 1_000
        ids = [await afs.new_scratch(rt, name, alarm_at=at) for name in ("a", "b", "c")]
        afs.ALARM_HOOKS[ids[0]] = afs.writes_implicitly
        afs.ALARM_HOOKS[ids[1]] = afs.writes_then_loses_them
        afs.ALARM_HOOKS[ids[2]] = afs.writes_implicitly
        host.evict_all_idle()
        activations = host.activations
        await rt.advance(1_000)
        assert sorted(s.object_id for s in afs.ALARM_LOG) == sorted(ids)
        assert host.activations - activations == 3  # one open an alarm
        # Open after their runs: the last (nothing else waited) and the failed one (its alarm,
        # kept for the retry, is due within idle_ms).
        assert {key[1] for key in host.active_keys()} == {afs.ALARM_LOG[-1].object_id, ids[1]}
        for oid in (ids[0], ids[2]):
            assert afs.items_in_file(host.path_for(NS, oid)) == [("x", "1")]
            assert sched.pending((NS, oid)) is None
        failed = (NS, ids[1])
        assert afs.items_in_file(host.path_for(*failed)) == []
        retry_at = sched.pending(failed)
        assert retry_at is not None and retry_at > at and sched.retry_count(failed) == 1
        assert await afs.scratch(rt, ids[1], afs.GetAlarm()) == at

        afs.ALARM_HOOKS[ids[1]] = afs.writes_implicitly  # the retry goes well
        host.evict_all_idle()
        await rt.advance(retry_at - rt.now_ms())
        assert [(s.object_id, s.retry_count) for s in afs.ALARM_LOG][-1] == (ids[1], 1)
        assert afs.items_in_file(host.path_for(*failed)) == [("x", "1")]
        assert sched.pending(failed) is None


@pytest.mark.anyio
async def test_a_request_served_while_an_alarm_only_handler_waits_keeps_its_actor_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RT-3, RT-9: the first of three evicted actors due at one instant gets a request while its
    alarm handler waits: the request is served by the activation the alarm opened (one open an
    alarm), the alarm is acknowledged once its run ended, and the actor stays open though other
    alarms were queued; the second, opened for its alarm alone, is closed after its run."""
    _only_alone(monkeypatch)
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, alarm_concurrency=1) as rt:
        host = rt.node.host
        sched = rt.node.scheduler
        assert sched is not None
        at = rt.now_ms() + 5_000
        first = await afs.new_scratch(rt, "first", alarm_at=at)
        second = await afs.new_scratch(rt, "second", alarm_at=at)
        third = await afs.new_scratch(rt, "third", alarm_at=at)
        host.evict_all_idle()
        running, release = anyio.Event(), anyio.Event()

        async def wait(_actor: afs.Scratch, _info: object) -> None:
            running.set()
            await release.wait()

        afs.ALARM_HOOKS[first] = wait
        activations = host.activations
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.advance, 5_000)
            await running.wait()
            assert sched.pending((NS, first)) == at  # not acknowledged while it runs
            await afs.scratch(rt, first, afs.Put(k="k", v="v"))
            release.set()
        assert [s.object_id for s in afs.ALARM_LOG] == [first, second, third]
        assert host.activations - activations == 3
        assert all(sched.pending((NS, oid)) is None for oid in (first, second, third))
        assert host.is_active(NS, first) and not host.is_active(NS, second)
        assert await afs.scratch(rt, first, afs.Get(k="k")) == "v"
