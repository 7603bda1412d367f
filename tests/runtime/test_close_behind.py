"""A connection a worker thread made for an alarm is closed behind only an idle actor's eviction
(RT-9, RT-10, RT-16): a reset actor's file is closed at once, so a request still suspended in it
cannot write on a connection waiting for its thread.
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
from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.opening import connect_ahead
from mailbox_actors.runtime.activation import META_KEYS
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
async def test_a_request_suspended_in_a_reset_actor_writes_nothing(tmp_path: Path) -> None:
    """RT-10, RT-16: when an actor whose connection a worker thread made (an alarm's open ahead)
    is reset (``ctx.abort``) while another request is suspended in it, its file is closed at
    once, not handed to a thread (here: held, as when they are busy): the suspended request's
    write then fails, nothing of it is stored, and it is answered as reset."""
    gate = threading.Event()
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=1) as rt:
        host = rt.node.host
        oid = await afs.new_scratch(rt, "reset")
        host.evict_all_idle()
        ahead = connect_ahead(host.path_for("scratch", oid), Durability.NORMAL, Limits(),
                              META_KEYS)
        assert ahead is not None
        assert host.activate(afs.Scratch, oid, create=False, ahead=ahead) is not None
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
