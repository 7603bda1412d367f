"""The host's eviction policy (RT-9, OPS-4): an actor whose alarm is due within ``idle_ms`` is not
evicted (it would be opened again for it at once), and past the bound such actors go last; the
default bound on open actors is what memory leaves room for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import actors_for_tests as afs
from mailbox_actors.platform.memory import ACTOR_BUDGET_BYTES, memory_bound
from mailbox_actors.testing import TestRuntime


@pytest.mark.anyio
async def test_an_actor_whose_alarm_is_due_within_idle_ms_stays_open_for_it(
        tmp_path: Path) -> None:
    """RT-9: idle past idle_ms but with its alarm due within idle_ms, the actor is kept open and
    its alarm runs without opening the file again; once nothing is due soon it is evicted."""
    async with TestRuntime(tmp_path, idle_ms=10_000, objects=afs.ALL_OBJECTS) as rt:
        host = rt.node.host
        start = rt.now_ms()
        soon = await afs.new_scratch(rt, "soon", alarm_at=start + 15_000)
        late = await afs.new_scratch(rt, "late", alarm_at=start + 60_000)
        activations = host.activations
        await rt.advance(11_000)  # both idle for idle_ms; only one has its alarm within it
        assert host.is_active("scratch", soon)
        assert not host.is_active("scratch", late)
        await rt.advance(4_000)
        assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(soon, start + 15_000)]
        assert host.activations == activations  # the alarm found it open
        await rt.advance(11_000)
        assert not host.is_active("scratch", soon)


@pytest.mark.anyio
async def test_past_the_bound_actors_with_an_alarm_due_soon_are_evicted_last(
        tmp_path: Path) -> None:
    """RT-9: with max_active_actors=2, opening a third evicts the least recently used actor
    without an alarm due within idle_ms, not the older one whose alarm is."""
    async with TestRuntime(tmp_path, idle_ms=10_000, max_active_actors=2,
                           objects=afs.ALL_OBJECTS) as rt:
        host = rt.node.host
        due = await afs.new_scratch(rt, "due", alarm_at=rt.now_ms() + 5_000)
        plain = await afs.new_scratch(rt, "plain")
        third = await afs.new_scratch(rt, "third")
        assert set(host.active_keys()) == {("scratch", due), ("scratch", third)}
        assert not host.is_active("scratch", plain)


def test_the_bound_on_open_actors_fits_a_quarter_of_memory() -> None:
    """OPS-4: max_active_actors is lowered so that every open actor's budget fits in a quarter
    of the machine's memory; a configured value below that stands; never below 1."""
    gib = 1 << 30
    assert memory_bound(10_000, memory=gib) == gib // 4 // ACTOR_BUDGET_BYTES == 512
    assert memory_bound(10_000, memory=24 * gib) == 10_000
    assert memory_bound(300, memory=gib) == 300
    assert memory_bound(10_000, memory=1024) == 1
