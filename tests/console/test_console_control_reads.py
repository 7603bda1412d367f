"""What the console reads from the control data (UI-4), on the SQLite file and on PostgreSQL
(CL-7): the event index's position and rate, counts, identities with their addresses, the newest
events (all, or one actor's), and an IdentityMailbox's identity."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from _pg import PgServer, find_binaries, new_database
from mailbox_actors.console.cluster_view import ClusterView
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.control.addresses import add_addresses
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.wire.control import EventIndexRow

BINDIR, WHY = find_binaries()
MAILBOX = "ab" * 32


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PgServer]:
    assert BINDIR is not None, WHY  # PostgreSQL 15's binaries are part of this machine's setup
    server = PgServer(BINDIR)
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture(params=["sqlite", "postgres"])
def dsn(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    return new_database(request.getfixturevalue("pg_server"))


async def _fill(db: ControlDb, now: int) -> str:
    tenant = await db.create_tenant("acme")
    ident = await db.create_identity(tenant.id, "support", MAILBOX)
    await db.set_identity_status(ident.id, "active")
    await add_addresses(db, ident.id, ["support@acme.example"], now)
    await db.index_events([
        EventIndexRow(event_id=f"evt_{i:04d}", tenant_id=tenant.id,
                      identity_id=ident.id if i % 2 else None, namespace="identity_mailbox",
                      object_id=MAILBOX if i % 2 else "cd" * 32, sequence=i, type="t.x",
                      occurred_at_ms=now - (120_000 if i < 3 else 1_000))
        for i in range(10)])
    return ident.id


def test_console_reads_the_control_data_on_both_stores(dsn: str | None, tmp_path: Path) -> None:
    """UI-4, CL-7: the same reads answer alike on the SQLite file and on PostgreSQL."""

    async def main() -> None:
        clock = SystemClock()
        now = clock.now_ms()
        if dsn is None:
            db = ControlDb(tmp_path / "control.sqlite", clock=clock, ids=Ids(clock, SystemRng()))
        else:
            from mailbox_actors.platform.control.postgres import control_on
            from mailbox_actors.platform.postgres.database import PgDatabase

            db = control_on(PgDatabase(dsn, setting="postgres", min_size=1, max_size=2),
                            clock=clock, ids=Ids(clock, SystemRng()))
        async with db:
            identity_id = await _fill(db, now)
        view = ClusterView(tmp_path, [("node-0", "http://127.0.0.1:9")], cluster_token="c" * 20,
                           operator_token="o" * 20, postgres=dsn)
        async with view:
            assert await view.cursor() == 10
            assert 0.1 < await view.events_per_s() <= 7 / 60 + 1e-9  # 7 in the last minute
            assert await view.counts() == {"tenants": 1, "identities": 1, "domains": 0}
            [(tenant, ident)] = await view.identities()
            assert (tenant.name, ident.id) == ("acme", identity_id)
            assert await view.addresses(identity_id) == ["support@acme.example"]
            newest = await view.recent_events(limit=3)
            assert [e["event_id"] for e in newest] == ["evt_0009", "evt_0008", "evt_0007"]
            mine = await view.recent_events(identity_id=identity_id, limit=100)
            assert len(mine) == 5
            assert [e["sequence"] for e in await view.object_events(MAILBOX)] == [9, 7, 5, 3, 1]
            assert await view.identity_of_mailbox(MAILBOX) == identity_id
            assert await view.identity_of_mailbox("ef" * 32) is None

    anyio.run(main)
