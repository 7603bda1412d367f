"""An evicted actor opened on the loop for its alarm is opened in three steps with the
scheduler's turn between them (requests first, ADR 0023, issue 28): the file connected, its
version read (where SQLite rebuilds the ``-shm`` index from the log), then the rest of the open; a
request that comes between the steps runs before the rest, and whatever happened meanwhile (the
actor opened by that request, the node stopping) leaves no connection behind.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import actors_for_tests as afs
from actors_for_tests import Get, scratch
from mailbox_actors.alarms.outcome import AlarmOutcome
from mailbox_actors.platform.storage import opening, wal_index
from mailbox_actors.testing import TestRuntime


def _open_descriptors(path: Path) -> int:
    """How many of this process's descriptors are open on ``path`` itself (not its log)."""
    target = os.fspath(path.resolve())
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                count += 1
        except OSError:
            continue
    return count


async def _evicted(rt: TestRuntime, name: str) -> str:
    oid = await afs.new_scratch(rt, name, alarm_at=rt.now_ms() + 60_000)
    rt.node.host.evict_all_idle()
    return oid


def _turns(then: Callable[[int], Awaitable[None]] | None = None,
           ) -> tuple[list[int], Callable[[], Awaitable[None]]]:
    """A turn that counts its calls (and runs ``then(n)`` at the n-th, from 1)."""
    calls: list[int] = []

    async def turn() -> None:
        calls.append(len(calls) + 1)
        if then is not None:
            await then(len(calls))

    return calls, turn


@pytest.mark.anyio
async def test_an_open_on_the_loop_awaits_a_turn_between_its_steps(tmp_path: Path) -> None:
    """RT-9, issue 28: with no file threads, an evicted actor's alarm awaits the turn three
    times: after the file is connected, before its first read (SQLite's rebuild of the ``-shm``
    index from the log, the longest piece of the open: session 20); after that read, before the
    rest of the open; and between the open and the run. It opens the file once and fires."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=0) as rt:
        host = rt.node.host
        oid = await _evicted(rt, "steps")
        activations = host.activations
        steps: list[str] = []
        recovered = opening.Connecting.recovered

        def recovering(self: opening.Connecting, path: str | Path) -> opening.Connected:
            steps.append("recovered")
            return recovered(self, path)

        async def turned(n: int) -> None:
            steps.append(f"turn {n}")

        calls, turn = _turns(turned)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(opening.Connecting, "recovered", recovering)
            result = await host.fire_alarm(("scratch", oid), 0, force=True, turn=turn)
        assert result.outcome is AlarmOutcome.DONE
        assert calls == [1, 2, 3]
        assert steps == ["turn 1", "recovered", "turn 2", "turn 3"]
        assert host.activations - activations == 1
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]


@pytest.mark.parametrize("between", [1, 2])  # connected | recovered | the rest
@pytest.mark.anyio
async def test_a_request_between_the_steps_opens_the_actor_and_the_alarm_uses_it(
        tmp_path: Path, between: int) -> None:
    """RT-9: a request that reaches the actor between the open's steps opens it itself; the
    alarm then runs on that activation and the actor stays open (a request used it); the
    connection of the first step is closed: once the actor is evicted no descriptor is left on
    the file and its count is given back (``wal_index``). (SQLite keeps a closed connection's
    descriptor while another connection of the process holds a lock on the file, a WAL
    reader's shared lock here, and closes it with the last: closing it at once would drop
    that lock.)"""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=0) as rt:
        host = rt.node.host
        oid = await _evicted(rt, "request-between")
        path = host.path_for("scratch", oid)
        activations = host.activations

        async def request(n: int) -> None:
            if n == between:
                assert await scratch(rt, oid, Get(k="none")) is None
                assert _open_descriptors(path) == 2  # the request's and the first step's

        _calls, turn = _turns(request)
        result = await host.fire_alarm(("scratch", oid), 0, force=True, turn=turn)
        assert result.outcome is AlarmOutcome.DONE
        assert host.activations - activations == 1  # the request's activation only
        assert host.is_active("scratch", oid)
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
        host.evict_all_idle()
        assert _open_descriptors(path) == 0
        assert wal_index.key(path) not in wal_index._open_here  # every count given back


@pytest.mark.parametrize("between", [1, 2])
@pytest.mark.anyio
async def test_a_node_stopping_between_the_steps_ends_the_wake_busy(tmp_path: Path,
                                                                    between: int) -> None:
    """RT-11: the node stopping while the alarm waits for its turn between the open's steps ends
    the wake BUSY (the alarm stays stored, fired by the next start) and closes the connection."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=0) as rt:
        host = rt.node.host
        oid = await _evicted(rt, "stopping")
        path = host.path_for("scratch", oid)

        async def stopping(n: int) -> None:
            if n == between:
                host.stopping = True

        try:
            _calls, turn = _turns(stopping)
            result = await host.fire_alarm(("scratch", oid), 0, force=True, turn=turn)
        finally:
            host.stopping = False
        assert result.outcome is AlarmOutcome.BUSY
        assert not host.is_active("scratch", oid)
        assert _open_descriptors(path) == 0
        assert wal_index.key(path) not in wal_index._open_here
        assert afs.ALARM_LOG == []


@pytest.mark.anyio
async def test_an_alarm_opened_on_the_loop_makes_its_file_path_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RT-9, issue 28: the open's second step is made on the path text its first step made (the
    id's form checked and the path formatted once an alarm, not once a step)."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, file_threads=0) as rt:
        host = rt.node.host
        oid = await _evicted(rt, "one-path")
        made: list[str] = []
        paths = type(host.paths)
        real = paths.file_for

        def file_for(self: object, namespace: str, object_id: str, own: bool = False) -> str:
            made.append(object_id)
            return real(self, namespace, object_id, own)  # type: ignore[arg-type]

        monkeypatch.setattr(paths, "file_for", file_for)
        _calls, turn = _turns()
        result = await host.fire_alarm(("scratch", oid), 0, force=True, turn=turn)
        assert result.outcome is AlarmOutcome.DONE
        assert made == [oid]
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
