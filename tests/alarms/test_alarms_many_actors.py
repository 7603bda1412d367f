"""3,000 actors with a bound of 30 open, a hundred times the bound (RT-9, AL-4, AL-5): open actors,
live activations and file descriptors stay bounded while every actor is created and while every
alarm fires, each at its due time on the FakeClock. (10,000 and 100 until session 20: the same
ratio at a third of the suite's time, 45-88 s of it then.)"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import ActorContext, AlarmInfo
from mailbox_actors.testing import TestRuntime

ACTORS = 3_000
BOUND = 30

pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """Real SQLite files, on tmpfs when there is one: the bounds are under test here, not the
    disk's fsync rate (each eviction checkpoints a WAL), which would make this five times slower."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="mailbox-actors-10k-", dir=shm))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def actor_descriptors(data_dir: Path) -> list[str]:
    """This process's descriptors of files below the node's directory's top level (actors')."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed since
            continue
        if target.is_relative_to(data_dir) and target.parent != data_dir:
            out.append(str(target))
    return out


def live(kind: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, kind))


class Peak:
    def __init__(self) -> None:
        self.active = 0
        self.fds = 0

    def sample(self, rt: TestRuntime) -> None:
        self.active = max(self.active, rt.node.host.active_count)
        self.fds = max(self.fds, open_fds())


@pytest.mark.anyio
@pytest.mark.timeout(600)
async def test_thousands_of_actors_stay_bounded_and_every_alarm_fires(data_dir: Path) -> None:
    """RT-9, AL-4, AL-5: with max_active_actors=30, creating 3,000 actors (each with an alarm)
    keeps open actors <= 30 and file descriptors bounded; advancing the FakeClock fires every
    alarm once, at its due time, within the same bounds; activations are not leaked."""
    async with TestRuntime(data_dir, max_active_actors=BOUND, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        base_fds = open_fds()
        peak = Peak()
        due: dict[str, int] = {}
        for i in range(ACTORS):
            # Several actors share each due instant; the order of creation is not the time order.
            at = t0 + 1_000 + (i * 7_919) % 2_000 * 10
            oid = await afs.new_scratch(rt, f"actor-{i}", alarm_at=at)
            due[oid] = at
            if i % 50 == 0:
                peak.sample(rt)
        assert peak.active <= BOUND
        # Each open actor may hold its database, WAL and shared-memory files.
        fd_budget = 3 * BOUND + 50
        assert peak.fds - base_fds <= fd_budget
        assert live(ActorContext) <= BOUND + 5
        assert live(SqlStorage) <= BOUND + 5
        assert rt.node.scheduler is not None and rt.node.scheduler.pending_count == ACTORS

        async def sample(actor: Scratch, info: AlarmInfo) -> None:
            peak.sample(rt)

        for oid in list(due)[::97]:
            afs.ALARM_HOOKS[oid] = sample
        await rt.advance(30_000)

        fired = {s.object_id: s for s in afs.ALARM_LOG}
        assert len(afs.ALARM_LOG) == ACTORS and fired.keys() == due.keys()
        assert all(s.now_ms == due[oid] == s.scheduled_ms for oid, s in fired.items())
        times = [s.now_ms for s in afs.ALARM_LOG]
        assert times == sorted(times)
        assert rt.node.metrics.get("alarms_fired_total", (("namespace", "scratch"),)) == ACTORS
        assert rt.node.scheduler.pending_count == 0
        assert peak.active <= BOUND
        assert peak.fds - base_fds <= fd_budget
        assert live(ActorContext) <= BOUND + 5
        assert live(SqlStorage) <= BOUND + 5
        assert rt.node.host.active_count <= BOUND
        assert open_fds() - base_fds <= fd_budget
        # With every actor evicted, nothing of the 3,000 is left, with no slack (a leak of one
        # descriptor or one object in a thousand actors shows): no descriptor of any actor's
        # files (the node's own files, at the top of its directory, aside) and no activation or
        # storage object alive.
        rt.node.host.evict_all_idle()
        assert rt.node.host.active_count == 0
        assert actor_descriptors(data_dir) == []
        assert live(ActorContext) == 0
        assert live(SqlStorage) == 0
