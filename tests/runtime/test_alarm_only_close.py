"""An actor opened for its alarm alone is closed after its run while other alarms wait (RT-9, AL-4,
issue 28): a burst of alarms on evicted actors keeps few files open and does not push request-hot
actors out of the open set; each alarm still opens its actor once, and an actor a request reached,
or whose next alarm is near, stays open.
"""

from __future__ import annotations

import gc
from pathlib import Path

import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import Get, Scratch, scratch
from mailbox_actors.runtime.actor import AlarmInfo
from mailbox_actors.testing import TestRuntime


async def _evicted_scratches(rt: TestRuntime, count: int, at: int) -> list[str]:
    """``count`` Scratch actors, each with its alarm at ``at``, all evicted."""
    oids = [await afs.new_scratch(rt, f"burst-{i}", alarm_at=at) for i in range(count)]
    rt.node.host.evict_all_idle()
    return oids


@pytest.mark.anyio
@pytest.mark.parametrize("file_threads", [0, 2])
async def test_a_burst_closes_each_actor_opened_for_its_alarm(tmp_path: Path,
                                                              file_threads: int) -> None:
    """Eight evicted actors due at one instant: each is opened once and fires once; every one
    whose run ended while others were still queued is closed after it, so only the last stays
    open (as a lone alarm's actor does); its write is there when it is opened again."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=file_threads,
                           alarm_concurrency=1) as rt:
        host = rt.node.host
        oids = await _evicted_scratches(rt, 8, rt.now_ms() + 5_000)
        activations = host.activations
        await rt.advance(5_000)
        assert sorted(s.object_id for s in afs.ALARM_LOG) == sorted(oids)
        assert host.activations - activations == len(oids)  # 1.00 activation per alarm
        assert host.active_keys() == [("scratch", afs.ALARM_LOG[-1].object_id)]
        for oid in oids:
            fired = await rt.run_in_actor("scratch", oid, lambda _actor, sql: sql.exec(
                "SELECT count(*) FROM fired").one()[0])
            assert fired == 1


@pytest.mark.anyio
async def test_an_actor_a_request_reached_during_its_alarm_stays_open(tmp_path: Path) -> None:
    """The first of three actors due at one instant gets a request while its alarm runs: it is
    in use, so it stays open after the run though alarms are queued; the others are closed."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, alarm_concurrency=1) as rt:
        host = rt.node.host
        first, *rest = await _evicted_scratches(rt, 3, rt.now_ms() + 5_000)
        running, release = anyio.Event(), anyio.Event()

        async def wait(_actor: Scratch, _info: AlarmInfo) -> None:
            running.set()
            await release.wait()

        afs.ALARM_HOOKS[first] = wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.advance, 5_000)
            await running.wait()
            assert await scratch(rt, first, Get(k="none")) is None
            release.set()
        assert [s.object_id for s in afs.ALARM_LOG] == [first, *rest]
        assert host.is_active("scratch", first)
        assert not host.is_active("scratch", rest[0])


@pytest.mark.anyio
async def test_an_actor_due_again_soon_stays_open(tmp_path: Path) -> None:
    """An actor whose alarm handler sets its next alarm within ``idle_ms`` would be opened again
    for it at once: it stays open after its run, though alarms are queued."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, alarm_concurrency=1,
                           idle_ms=60_000) as rt:
        host = rt.node.host
        first, *rest = await _evicted_scratches(rt, 3, rt.now_ms() + 5_000)

        async def again(actor: Scratch, _info: AlarmInfo) -> None:
            actor.sql.transaction_sync(lambda tx: tx.set_alarm(actor.ctx.now_ms() + 30_000))

        afs.ALARM_HOOKS[first] = again
        await rt.advance(5_000)
        assert [s.object_id for s in afs.ALARM_LOG] == [first, *rest]
        assert host.is_active("scratch", first)
        assert not host.is_active("scratch", rest[0])


@pytest.mark.anyio
async def test_an_open_actor_stays_open_after_its_alarm(tmp_path: Path) -> None:
    """An actor open before its alarm (a request used it) is not closed after the run, whatever
    is queued: only activations made for an alarm alone are."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, alarm_concurrency=1) as rt:
        host = rt.node.host
        first, *rest = await _evicted_scratches(rt, 3, rt.now_ms() + 5_000)
        assert await scratch(rt, first, Get(k="none")) is None  # opened by a request
        await rt.advance(5_000)
        assert [s.object_id for s in afs.ALARM_LOG] == [first, *rest]
        assert host.is_active("scratch", first)
        assert not host.is_active("scratch", rest[0])


def _cached_statements(act: object) -> int:
    """How many prepared statements the activation's connection keeps (CPython's cache)."""
    conn = act.runtime_storage.sql._conn  # type: ignore[attr-defined]
    caches = [r for r in gc.get_referents(conn) if hasattr(r, "cache_info")]
    assert len(caches) == 1
    return int(caches[0].cache_info().currsize)


@pytest.mark.anyio
async def test_an_actor_left_open_after_its_alarm_has_shed_its_caches(tmp_path: Path) -> None:
    """ADR 0015, 0017: an actor opened on the loop for its alarm sheds what its open and its run
    left cached once the run ended and it stays open (the last of a burst, or a wake that was not
    due); one closed right after its run (the others) frees it all with its connection."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, alarm_concurrency=1) as rt:
        host = rt.node.host
        oids = await _evicted_scratches(rt, 3, rt.now_ms() + 5_000)
        await rt.advance(5_000)
        kept = [key for key in host.active_keys() if key[1] in oids]
        assert kept == [("scratch", afs.ALARM_LOG[-1].object_id)]
        assert _cached_statements(host._active[kept[0]]) == 0
        # A wake for an alarm not due yet: the actor stays open, shed all the same.
        later = await afs.new_scratch(rt, "later", alarm_at=rt.now_ms() + 60_000)
        host.evict_all_idle()
        assert (await host.fire_alarm(("scratch", later), 0)).outcome.name == "LATER"
        assert _cached_statements(host._active[("scratch", later)]) == 0
