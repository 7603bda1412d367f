"""``mailbox-actors migrate-to-postgres`` (CL-7): a single-machine cluster's control data and queues
copied into a real PostgreSQL (started and stopped by this module, by pid), in one transaction;
idempotent; a target holding other data refused before anything is written; a running cluster's
directory refused."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from _pg import PgServer, new_database, serving
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.control.addresses import add_addresses, resolve
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.control.postgres import control_on
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.locks import DataDirLock
from mailbox_actors.platform.postgres.database import PgDatabase
from mailbox_actors.platform.queues import QueueService
from mailbox_actors.platform.queues.postgres import queues_on
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.wire.control import EventIndexRow

pytestmark = pytest.mark.slow

MAILBOX = "a" * 64


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with serving() as server:
        yield server


def _migrate(data: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", "migrate-to-postgres",
                           "--data", str(data), "--postgres", dsn], capture_output=True,
                          text=True, timeout=120)


async def _single_machine_cluster(data: Path, clock: FakeClock) -> tuple[str, list[str]]:
    ids = Ids(clock, SeededRng(1))
    async with ControlDb(data / "control.sqlite", clock=clock, ids=ids) as db, \
            QueueService(data / "queues.sqlite", clock=clock, ids=ids) as q:
        tenant = await db.create_tenant("acme", webhook_url="https://h.example/x",
                                        webhook_secret="s" * 20)
        ident = await db.create_identity(tenant.id, "ops", MAILBOX)
        await db.set_identity_status(ident.id, "active")
        await add_addresses(db, ident.id, ["ops@acme.example"], clock.now_ms())
        await db.index_events([EventIndexRow(f"evt_{n:04d}", tenant.id, ident.id, "identity_mailbox",
                                             MAILBOX, n, "identity.noted", n) for n in (3, 1, 2)])
        sent = await q.send_batch("webhooks", [{"v": 1, "kind": "event", "n": n} for n in range(3)])
        await q.send("jobs", {"v": 1, "kind": "job"}, delay_seconds=60)
    return tenant.id, sent


def test_a_cluster_moves_whole_once_and_other_data_is_refused(pg: PgServer, tmp_path: Path
                                                                ) -> None:
    """CL-7: every record and message arrives (the index and queues in their own order); running
    it again copies nothing; a database holding another cluster's tenant is refused and left as
    it was; a directory a cluster runs on is refused."""
    clock = FakeClock()
    data = tmp_path / "data"
    data.mkdir()
    tenant_id, sent = anyio.run(_single_machine_cluster, data, clock)
    dsn = new_database(pg)
    first = _migrate(data, dsn)
    assert first.returncode == 0, first.stderr
    assert "tenants: 1/1" in first.stderr and "event_index: 3/3" in first.stderr
    assert "done: 10 row(s) copied, 0 already there" in first.stderr

    async def check() -> None:
        db = PgDatabase(dsn)
        control = control_on(db, clock=clock, ids=Ids(clock, SeededRng(2)))
        queues = queues_on(db, clock=clock, ids=Ids(clock, SeededRng(3)))
        async with control, queues:
            assert (await control.get_tenant(tenant_id)).name == "acme"  # type: ignore[union-attr]
            assert [e.event_id for e in await control.events(tenant_id)] == [
                "evt_0003", "evt_0001", "evt_0002"]
            found = await resolve(control, "ops@acme.example")
            assert found is not None and found.mailbox_id == MAILBOX
            assert [m.id for m in await queues.receive("webhooks")] == sent
            assert (await queues.stats())["jobs"]["delayed"] == 1

    anyio.run(check)
    again = _migrate(data, dsn)
    assert again.returncode == 0 and "done: 0 row(s) copied, 10 already there" in again.stderr

    other = new_database(pg)

    async def foreign() -> None:
        async with control_on(PgDatabase(other), clock=clock, ids=Ids(clock, SeededRng(4))) as c:
            await c.create_tenant("someone-else")

    anyio.run(foreign)
    refused = _migrate(data, other)
    assert refused.returncode == 1 and "1 row(s) of tenants not in" in refused.stderr

    async def untouched() -> None:
        async with control_on(PgDatabase(other), clock=clock, ids=Ids(clock, SeededRng(5))) as c:
            assert [t.name for t in await c.list_tenants()] == ["someone-else"]

    anyio.run(untouched)
    lock = DataDirLock(data.resolve())
    lock.acquire()
    try:
        running = _migrate(data, new_database(pg))
        assert running.returncode == 1 and "stop it first" in running.stderr
    finally:
        lock.release()
