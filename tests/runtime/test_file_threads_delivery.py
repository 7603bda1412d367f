"""Files opened ahead in worker threads reach the event loop (AL-4, RT-3, RT-9): every open is
delivered to its waiter, those that finish while the loop is busy together in one hand-off, and
one whose waiter gave up is closed rather than left open.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.opening import open_storage
from mailbox_actors.runtime.activation import META_KEYS
from mailbox_actors.runtime.file_threads import FileThreads


def _actor_files(tmp_path: Path, count: int) -> list[Path]:
    paths = []
    for i in range(count):
        path = tmp_path / f"a{i}.sqlite"
        storage = open_storage(path, create=True, durability=Durability.NORMAL,
                               limits=Limits(), now_ms=lambda: 0)
        assert storage is not None
        storage._conn.close()
        paths.append(path)
    return paths


@pytest.mark.anyio
async def test_opens_finished_while_the_loop_is_busy_are_all_delivered_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AL-4: three opens that finish while the loop thread is held (here: joining the threads)
    each reach their waiter with their file's connection, through one wake of the loop."""
    paths = _actor_files(tmp_path, 3)
    loop = asyncio.get_running_loop()
    wakes = 0
    real = loop.call_soon_threadsafe

    def counted(*args: object) -> asyncio.Handle:
        nonlocal wakes
        wakes += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    files = FileThreads(2)
    futures = [files.open(p, Durability.NORMAL, Limits(), META_KEYS) for p in paths]
    files.stop()
    files.join(30.0)  # the loop thread is held until every open finished
    opened = [await fut for fut in futures]
    try:
        assert all(o is not None for o in opened)
        assert wakes == 1
    finally:
        for o in opened:
            if o is not None:
                o.conn.close()


@pytest.mark.anyio
async def test_an_open_whose_waiter_gave_up_is_closed(tmp_path: Path) -> None:
    """RT-3: a connection made ahead for a wait cancelled meanwhile is closed on delivery, so
    no connection to the file outlives the open."""
    [path] = _actor_files(tmp_path, 1)
    files = FileThreads(1)
    fut = files.open(path, Durability.NORMAL, Limits(), META_KEYS)
    fut.cancel()
    files.stop()
    files.join(30.0)
    await asyncio.sleep(0)  # the loop runs the delivery scheduled by the thread
    assert _held(path) == []


def _held(path: Path) -> list[Path]:
    """This process's descriptors on ``path`` (its log and -shm included)."""
    return [p for p in Path("/proc/self/fd").iterdir() if str(path) in str(p.resolve())]
