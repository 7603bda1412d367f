"""``alarms_fired_total`` hears of a burst's alarms on evicted actors once a worker's run of the
pool, as it does of open actors' (AL-5, OPS metrics): not once an alarm, which was a tenth of a
burst's scheduler work an alarm (callgrind, session 21).

Deterministic: the node runs on the system clock moved a day ahead for the burst, and the pool's
turns are measured by a clock that never moves, with no look (as in test_alarm_fairness.py), so
a worker's run ends only when the queue is empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.alarms import alarm_pool
from mailbox_actors.node import Node
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.runtime.actor import AlarmInfo
from mailbox_actors.runtime.settings import RuntimeSettings

BURST = 60
GUARD_S = 60  # only against a hang


class _MovableClock(SystemClock):
    def __init__(self) -> None:
        self.offset_ms = 0

    def now_ms(self) -> int:
        return super().now_ms() + self.offset_ms


@pytest.fixture(params=[("asyncio", {}), ("asyncio", {"use_uvloop": True})], ids=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    afs.reset_state()
    yield
    afs.reset_state()


@pytest.mark.anyio
async def test_alarms_on_evicted_actors_are_reported_once_a_run_not_once_an_alarm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Turns end by the clock alone (which never moves): the look would end them whenever the
    # burst's own wake-ups are ready, at any alarm.
    monkeypatch.setattr(alarm_pool, "_others_ready", lambda loop, pool: None)
    clock = _MovableClock()
    node = Node(RuntimeSettings(data_dir=str(tmp_path), file_threads=0), clock=clock,
                objects=afs.ALL_OBJECTS)
    assert node.scheduler is not None
    node.scheduler.turn_clock = lambda: 0.0  # read when the real-time loop starts its pool
    await node.start()
    try:
        due = clock.now_ms() + 86_400_000
        oids = [await afs.new_scratch(node, f"t{i}", alarm_at=due) for i in range(BURST)]
        all_fired = anyio.Event()

        async def count(actor: Scratch, info: AlarmInfo) -> None:
            if len(afs.ALARM_LOG) == BURST:
                all_fired.set()

        for oid in oids:
            afs.ALARM_HOOKS[oid] = count
        node.host.evict_all_idle()
        assert node.host.active_count == 0
        reports: list[float] = []
        all_reported = anyio.Event()
        inc = node.metrics.inc

        def counted(name: str, labels: Any = (), value: float = 1) -> None:
            if name == "alarms_fired_total":
                reports.append(value)
                if sum(reports) >= BURST:
                    all_reported.set()
            inc(name, labels, value)

        node.metrics.inc = counted  # type: ignore[method-assign]
        opened = node.host.activations
        clock.offset_ms = 86_400_000
        node.scheduler.book.wake_if_before(0)
        with anyio.fail_after(GUARD_S):
            await all_fired.wait()
            await all_reported.wait()  # the last run's report, at its end
        assert node.host.activations - opened == BURST  # every one opened for its alarm
        assert sum(reports) == BURST
        assert node.metrics.get("alarms_fired_total", (("namespace", "scratch"),)) == BURST
        assert len(reports) <= BURST // 4  # a report a run of several alarms, not one each
    finally:
        await node.stop()
