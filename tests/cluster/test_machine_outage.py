"""CL-17: a slot suspended in a PostgreSQL outage is opened again at the same epoch, even when its
node is still stopping as the database comes back (a slow stop at load: the fault test saw the
slot re-taken at a new epoch there).

One machine in this process on a real PostgreSQL; its monotonic clock is the test's (``Mono``),
the outage is the renewal failing, and the suspended node's stop is held until the test lets it go.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from mailbox_actors.cluster.lease_table import LeaseTable, TableUnreachable
from mailbox_actors.cluster.machine import Machine, MachineSettings, SlotHost
from mailbox_actors.cluster.slots import secret_fingerprint
from mailbox_actors.runtime.settings import DEFAULT_ID_SECRET, RuntimeSettings

pytestmark = pytest.mark.anyio

TTL_S, RENEW_S = 2.0, 0.5


class Mono:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def _until(done: Callable[[], bool], what: str) -> None:
    """Wait (bounded, real time) until the tasks the machine spawned got ``done``."""
    with anyio.move_on_after(60):
        while not done():  # noqa: ASYNC110 - state of the machine's tasks, no event to wait on
            await anyio.sleep(0.01)
    assert done(), f"not within 60 s: {what}"


async def test_cl17_a_suspended_slot_still_stopping_is_reopened_at_its_epoch(
        pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = LeaseTable(pg_dsn)
    assert await table.create(1, secret_fingerprint(DEFAULT_ID_SECRET), ["m1"], "local")
    clock = Mono()
    machine = Machine(MachineSettings(name="m1", volumes=tmp_path / "v", url="http://m1",
                                      ttl_s=TTL_S, renew_s=RENEW_S),
                      RuntimeSettings(data_dir=str(tmp_path / "v")), table,
                      cluster_token="c" * 32, operator_token="o" * 32, monotonic=clock)
    let_go = anyio.Event()
    await machine.start()
    try:
        host = machine.hosts[0]
        assert host.node is not None and host.lease.epoch == 1
        node = host.node
        stop = node.stop

        async def slow_stop(grace_ms: int | None = None) -> None:
            await let_go.wait()  # the node's stop takes long (a busy machine)
            await stop(grace_ms)

        monkeypatch.setattr(node, "stop", slow_stop)
        renew = machine.keeper.renew

        async def unreachable() -> set[int]:
            raise TableUnreachable("outage")

        # The outage: renewals fail; past the deadline by more than TTL/2 the slot is suspended.
        monkeypatch.setattr(machine.keeper, "renew", unreachable)
        clock.t += TTL_S * 1.6
        await machine.tick()
        await _until(lambda: host.node is None, "the slot suspended")
        assert host.stop is not None  # its node still stopping
        # PostgreSQL is back: the renewal at the same epoch succeeds while the node still stops;
        # the volume is still locked by it, so nothing may be opened yet.
        monkeypatch.setattr(machine.keeper, "renew", renew)
        opened_while_stopping: list[int] = []
        real_open = machine._open

        async def watched_open(h: SlotHost) -> None:
            if not let_go.is_set():
                opened_while_stopping.append(h.slot)
            await real_open(h)

        monkeypatch.setattr(machine, "_open", watched_open)
        await machine.tick()
        await anyio.wait_all_tasks_blocked()  # what the tick spawned has begun
        assert opened_while_stopping == []  # a start now would meet the volume's lock
        assert machine.hosts.get(0) is host and host.lease.epoch == 1
        let_go.set()
        await _until(lambda: host.stop is None, "the suspended node stopped")
        while machine.hosts.get(0) is host and host.node is None:
            clock.t += RENEW_S
            await machine.tick()
            await _until(lambda: not host.opening, "the open ended")
        host = machine.hosts[0]
        assert host.lease.epoch == 1 and not host.lease.lost
        assert host.node is not None and host.node is not node  # opened again, same epoch
        assert [r.epoch for r in await table.slot_map()] == [1]
    finally:
        let_go.set()  # a failed assertion above must not leave the machine's stop waiting
        await machine.stop()
        await table.close()
