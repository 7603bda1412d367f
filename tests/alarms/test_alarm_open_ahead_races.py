"""Opening an evicted actor's file ahead of its alarm, in a worker thread, against what the event
loop does to the same actor meanwhile (RT-3, RT-11, RT-12, RT-15, AL-4): a connection made ahead
is used only when nobody opened or closed that file on the loop while it was being made, and
with ``TestRuntime``'s default (no file threads) alarms due at one fake instant run in one order.

A gate on the real ``connect_ahead`` holds the thread between its open and its hand-back, so the
loop's moves land exactly inside that window (the thread tells the loop it got there through
``call_soon_threadsafe``: no sleeping, no polling).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from mailbox_actors.runtime import file_threads
from mailbox_actors.testing import TestRuntime


class _Gate:
    """Replaces ``file_threads.connect_ahead``: the real open, then the loop is told, then the
    thread waits until ``release``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.real = file_threads.connect_ahead
        self.loop = loop
        self.opened = asyncio.Event()
        self._go = threading.Event()

    def __call__(self, *args: Any) -> Any:
        conn = self.real(*args)
        self.loop.call_soon_threadsafe(self.opened.set)
        self._go.wait(30)
        return conn

    def release(self) -> None:
        self._go.set()


async def _wipe(actor: Any) -> None:
    actor.sql.delete_all()


@pytest.mark.anyio
async def test_an_actor_deleted_while_its_alarm_opened_it_ahead_is_not_revived(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RT-15, RT-11: while an alarm's thread opens an evicted actor's file, a request activates
    the actor, deletes everything and the actor is evicted (its file removed). The connection
    made ahead (to the removed file) is not installed: the object is gone, made again it is a new
    object, and what it then acknowledges is in its file after eviction and reopening."""
    gate = _Gate(asyncio.get_running_loop())
    monkeypatch.setattr(file_threads, "connect_ahead", gate)
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=4) as rt:
        host = rt.node.host
        host._files.opened_on_loop(wall_s=0.010, busy_s=0.0)  # opens wait: it opens ahead
        oid = await afs.new_scratch(rt, "victim", alarm_at=rt.now_ms() + 5_000)
        path = host.path_for("scratch", oid)
        host.evict_all_idle()
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.advance, 5_000)  # the alarm fires: its file is opened ahead
            await gate.opened.wait()
            await afs.scratch(rt, oid, afs.Run(hook=afs.hook(lambda a, c, x: _wipe(a)), arg=None))
            host.evict_all_idle()
            assert not path.exists()
            gate.release()
        assert not host.is_active("scratch", oid)
        assert await afs.new_scratch(rt, "victim") == oid
        await afs.scratch(rt, oid, afs.Put(k="k2", v="v2", tx=True))
        host.evict_all_idle()
        assert path.exists()
        assert await afs.scratch(rt, oid, afs.Get(k="k2")) == "v2"


@pytest.mark.anyio
async def test_an_actor_evicted_while_its_alarm_opened_it_ahead_runs_its_alarm_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AL-4, RT-3: a request activates the actor and it is evicted again while its alarm's file
    is being opened ahead; the alarm still runs once, on a connection the loop opened, and its
    write is there after the next eviction."""
    gate = _Gate(asyncio.get_running_loop())
    monkeypatch.setattr(file_threads, "connect_ahead", gate)
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=4) as rt:
        host = rt.node.host
        host._files.opened_on_loop(wall_s=0.010, busy_s=0.0)  # opens wait: it opens ahead
        oid = await afs.new_scratch(rt, "moved", alarm_at=rt.now_ms() + 5_000)
        host.evict_all_idle()
        afs.ALARM_LOG.clear()
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.advance, 5_000)
            await gate.opened.wait()
            assert await afs.scratch(rt, oid, afs.Get(k="k")) is None
            host.evict_all_idle()
            gate.release()
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
        host.evict_all_idle()
        fired = await rt.run_in_actor("scratch", oid, lambda _actor, sql: sql.exec(
            "SELECT count(*) FROM fired").one()[0])
        assert fired == 1


async def _order_once(tmp: Path) -> list[int]:
    async with TestRuntime(tmp, objects=afs.ALL_OBJECTS) as rt:
        at = rt.now_ms() + 5_000
        oids = [await afs.new_scratch(rt, f"a{i}", alarm_at=at) for i in range(12)]
        rt.node.host.evict_all_idle()
        afs.ALARM_LOG.clear()
        await rt.advance(5_000)
        return [oids.index(s.object_id) for s in afs.ALARM_LOG]


@pytest.mark.anyio
async def test_alarms_due_at_one_fake_instant_run_in_one_order_every_run(tmp_path: Path) -> None:
    """RT-12: in a TestRuntime, twelve evicted actors' alarms due at the same instant run in the
    same order in every fresh runtime (their files open on the loop, not in threads that finish
    in any order), so ids minted and random draws made by handlers repeat too."""
    orders = {tuple(await _order_once(tmp_path / f"run{i}")) for i in range(4)}
    assert len(orders) == 1
    assert sorted(next(iter(orders))) == list(range(12))

