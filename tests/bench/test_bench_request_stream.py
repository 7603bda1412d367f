"""The outside caller of ``request_p99_during_alarm_burst_ms`` (``bench.request_stream``): a process
of its own whose requests are timed from their sending, into the phase current at each answer.

Nothing here asserts a speed: the stream runs until each phase has its requests (an event, not a
timer), and what is checked is where they went and that the caller process ends with the stream.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import anyio
import pytest

from mailbox_actors.bench.actors import BenchTicker, TickInit, ticker_name
from mailbox_actors.bench.request_stream import (
    LOOP_ENV,
    on_loop,
    request_stream,
    served_loop_name,
)
from mailbox_actors.http.server import loop_backend_options
from mailbox_actors.node import Node
from mailbox_actors.runtime.settings import RuntimeSettings

GUARD_S = 60  # only against a hang
PER_PHASE = 20
TENANT = "t_bench"


class _Counted(list[float]):
    """A phase's latencies that sets ``full`` at PER_PHASE of them."""

    def __init__(self) -> None:
        super().__init__()
        self.full = anyio.Event()

    def append(self, ms: float) -> None:
        super().append(ms)
        if len(self) >= PER_PHASE:
            self.full.set()


@pytest.mark.anyio
async def test_an_outside_caller_fills_each_phase_and_ends_with_the_stream(tmp_path: Path) -> None:
    """Issue 28's request stream: the caller's reads of ticker 0 answer, each timed (a positive
    number of milliseconds) into the phase that was last when it was answered; once the stream
    is stopped no request is counted any more and the caller's process has exited."""
    await _two_phases(tmp_path)


@pytest.mark.anyio
async def test_the_stream_runs_on_the_loop_serve_runs_a_node_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28's figure is measured where users run a node (ADR 0023): ``on_loop`` runs the
    measurement on the loop ``serve`` uses (uvloop where importable), in a thread of its own,
    and the stream and its caller process work there as on asyncio's loop; ``bench
    --stream-loop asyncio`` keeps it on asyncio's."""
    monkeypatch.delenv(LOOP_ENV, raising=False)
    loop = served_loop_name()
    assert loop == ("uvloop" if loop_backend_options() else "asyncio")
    assert await on_loop(loop, _two_phases, tmp_path) == loop
    monkeypatch.setenv(LOOP_ENV, "asyncio")  # bench --stream-loop asyncio
    assert served_loop_name() == "asyncio"


async def _two_phases(tmp_path: Path) -> str:
    """A node with ticker 0 and the stream into two phases, checked; the running loop's kind."""
    node = Node(RuntimeSettings(data_dir=str(tmp_path)), objects=(BenchTicker,))
    await node.start()
    try:
        oid = node.id_from_name(BenchTicker.namespace, ticker_name(0))
        await node.call(BenchTicker.namespace, oid, TickInit(alarm_at_ms=2**50), tenant_id=TENANT)
        children_before = set(_children())
        first, second = _Counted(), _Counted()
        phases: list[list[float]] = [first]
        stop = anyio.Event()
        with anyio.fail_after(GUARD_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(request_stream, node, TENANT, phases, stop)
                await first.full.wait()
                phases.append(second)
                counted = len(first)
                await second.full.wait()
                stop.set()
        assert len(first) == counted  # nothing went into the first phase after the switch
        assert len(second) >= PER_PHASE
        assert all(ms > 0 for ms in first + second)
        assert set(_children()) <= children_before  # the caller has exited (and was waited for)
    finally:
        await node.stop()
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


def _children() -> list[int]:
    """This process's child processes (Linux's /proc)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        return []
