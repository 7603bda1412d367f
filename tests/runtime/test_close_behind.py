"""Every evicted actor's file is closed behind its eviction in a worker thread (RT-9, RT-11,
OPS-4), whether a request or an alarm opened it: the loop does not wait for the close, the actor
can be opened again while its old connection still waits to close, and nothing is held once the
node stopped.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError


def _descriptors_on(path: Path) -> int:
    """Descriptors this process holds on ``path``, its ``-wal`` and its ``-shm``."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            held += os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
        except OSError:
            continue
    return held


@pytest.mark.anyio
async def test_an_actor_a_request_opened_is_closed_behind_and_can_open_again_meanwhile(
        tmp_path: Path) -> None:
    """RT-9, OPS-4: an actor opened by a request is closed by a worker thread once evicted; held
    in that thread (its close not yet run), a request opens the actor again on a connection of
    its own and writes; the old connection's close then leaves the new one working, and after
    the node's stop nothing is held on the file."""
    gate = threading.Event()
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=1) as rt:
        host = rt.node.host
        oid = await afs.new_scratch(rt, "behind")
        await rt.call("scratch", oid, afs.Put(k="k", v="one"), tenant_id=afs.TENANT)
        path = host.path_for("scratch", oid)
        files = host._files
        handed: list[bool] = []
        real = files.close_behind

        def held_close(close: Callable[[], None]) -> bool:
            def after_gate() -> None:
                gate.wait()
                close()
            handed.append(real(after_gate))
            return handed[-1]

        files.close_behind = held_close  # type: ignore[method-assign]
        try:
            host.evict_idle(rt.now_ms() + host.settings.idle_ms + 1)  # the idle sweep
            assert handed == [True]  # the close went to the thread, which waits at the gate
            assert not host.is_active("scratch", oid)
            await rt.call("scratch", oid, afs.Put(k="k", v="two"), tenant_id=afs.TENANT)
        finally:
            gate.set()
        files.close_behind = real  # type: ignore[method-assign]
        assert await rt.call("scratch", oid, afs.Get(k="k"), tenant_id=afs.TENANT) == "two"
        host.evict_all_idle()  # a mass eviction (then a trim): closed on the loop
    assert _descriptors_on(path) == 0  # the stop waited for the closes queued before it


@pytest.mark.anyio
async def test_a_request_suspended_in_a_reset_actor_writes_nothing(tmp_path: Path) -> None:
    """RT-10, RT-16: when an actor is reset (``ctx.abort``) while another request is suspended in
    it, its file is closed at once, not handed to a worker thread (here: held, as when they are
    busy): the suspended request's write then fails and nothing of it is stored, and it is
    answered as reset."""
    gate = threading.Event()
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=1) as rt:
        host = rt.node.host
        oid = await afs.new_scratch(rt, "reset")
        files = host._files
        real = files.close_behind

        def held_close(close: Callable[[], None]) -> bool:
            def after_gate() -> None:
                gate.wait()
                close()
            return real(after_gate)

        files.close_behind = held_close  # type: ignore[method-assign]
        go, reached = anyio.Event(), anyio.Event()

        async def slow(actor: Scratch, _call: Call, _arg: Any) -> str:
            reached.set()
            await go.wait()
            actor.sql.exec("INSERT OR REPLACE INTO items (k, v) VALUES ('late', 'after reset')")
            return "wrote"

        async def aborter(actor: Scratch, _call: Call, _arg: Any) -> None:
            actor.ctx.abort("reset by the test")

        answers: list[str] = []

        async def first() -> None:
            try:
                answers.append(await afs.run(rt, oid, slow))
            except MailboxActorsError as e:
                answers.append(e.code.value)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                await reached.wait()
                with pytest.raises(MailboxActorsError):
                    await afs.run(rt, oid, aborter)
                go.set()
        finally:
            gate.set()
            files.close_behind = real  # type: ignore[method-assign]
        assert answers != ["wrote"]
        assert await rt.call("scratch", oid, afs.Get(k="late"), tenant_id=afs.TENANT) is None
