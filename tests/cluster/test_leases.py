"""CL-8, CL-9, CL-10, CL-17: the cluster's rows and the leases in a real PostgreSQL.

Expiry is the database's: a test that needs a lease expired moves its ``expires_at`` into the
past in the database rather than waiting. A machine's deadline runs on a monotonic clock the test
moves (``Mono``), so a clock jump is a step of it.
"""

from __future__ import annotations

import psycopg
import pytest

from _pg import PgServer
from mailbox_actors.cluster.lease_table import LeaseTable, TableUnreachable
from mailbox_actors.cluster.leases import LeaseKeeper, handed_back, wanted_slots
from mailbox_actors.cluster.slots import secret_fingerprint, slot_names, slot_of
from mailbox_actors.core.placement import owner_index
from mailbox_actors.runtime.settings import SettingsError

pytestmark = pytest.mark.anyio

FP = secret_fingerprint("s" * 32)


class Mono:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _expire(dsn: str, slot: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE ma_slot_leases SET expires_at = now() - interval '1 second' "
                     "WHERE slot = %s", (slot,))


async def _created(dsn: str, slots: int = 4, policy: str = "shared") -> LeaseTable:
    table = LeaseTable(dsn)
    assert await table.create(slots, FP, ["m1", "m2"], policy)
    return table


def test_cl8_an_id_has_one_slot_computed_from_s_alone() -> None:
    ids = [f"{i:064x}" for i in range(2000)]
    placed = [slot_of(64, "scratch", i) for i in ids]
    assert placed == [slot_of(64, "scratch", i) for i in ids]
    assert set(placed) == set(range(64))  # every slot gets ids
    # The same answers as the single-machine cluster's hash over the slot names.
    assert placed == [owner_index(slot_names(64), "scratch", i) for i in ids]
    assert secret_fingerprint("a" * 32) != FP and len(FP) == 16


async def test_cl8_slots_are_fixed_at_creation_with_the_secret_fingerprint(pg_dsn: str) -> None:
    table = await _created(pg_dsn, slots=8)
    try:
        assert not await table.create(8, FP, ["m1", "m2"], "shared")  # once: a no-op again
        with pytest.raises(SettingsError, match=r"setting .slots. is 16 .* 8 slots"):
            await table.create(16, FP, ["m1"], "shared")
        with pytest.raises(SettingsError, match="setting 'id_secret'"):
            await table.create(8, secret_fingerprint("t" * 32), ["m1"], "shared")
        row = await table.cluster()
        assert row is not None and (row.slots, row.slot_failover) == (8, "shared")
        homes = [r.home for r in await table.slot_map()]
        assert homes == ["m1", "m2"] * 4
        with pytest.raises(SettingsError, match="slot_failover"):
            await LeaseTable(pg_dsn).create(8, FP, ["m1"], "nfs")
    finally:
        await table.close()


async def test_cl9_one_holder_epochs_increase_and_renewal_is_fenced(pg_dsn: str) -> None:
    table = await _created(pg_dsn)
    mono = Mono()
    a = LeaseKeeper(table, "m1", ttl_s=10, renew_s=3, monotonic=mono)
    b = LeaseKeeper(LeaseTable(pg_dsn), "m2", ttl_s=10, renew_s=3, monotonic=mono)
    try:
        first = await a.take(0)
        assert first is not None and first.epoch == 1 and first.serving()
        assert await b.take(0) is None  # held and live: never two holders
        _expire(pg_dsn, 0)
        second = await b.take(0)
        assert second is not None and second.epoch == 2
        # The old holder's renewal is fenced on (machine, epoch): it learns it lost the slot.
        assert await a.renew() == {0}
        assert first.lost and not first.serving() and 0 not in a.held
        assert await b.renew() == set() and second.serving()
        # A restarted process of m2 takes a new epoch, even of its own live lease.
        again = LeaseKeeper(LeaseTable(pg_dsn), "m2", ttl_s=10, renew_s=3, monotonic=mono)
        third = await again.take(0)
        assert third is not None and third.epoch == 3
        assert await b.renew() == {0}
        await again.leave(third)
        rows = await table.slot_map()
        assert rows[0].holder is None and not rows[0].live and rows[0].epoch == 3
        fourth = await a.take(0)  # left: taken at once, no TTL to wait
        assert fourth is not None and fourth.epoch == 4
        await again.table.close()
    finally:
        await table.close()
        await b.table.close()


async def test_cl10_the_deadline_runs_on_the_monotonic_clock_from_the_renewal_sent(
        pg_dsn: str) -> None:
    table = await _created(pg_dsn)
    mono = Mono()
    keeper = LeaseKeeper(table, "m1", ttl_s=10, renew_s=3, monotonic=mono)
    try:
        lease = await keeper.take(1)
        assert lease is not None and lease.deadline == 1010.0
        mono.t += 3
        await keeper.renew()
        assert lease.deadline == 1013.0 and lease.serving()
        # A clock jump (suspend, a stepped clock) past the deadline: never serves past it.
        mono.t += 10
        assert not lease.serving()
        await keeper.renew()  # still held at its epoch: serves again
        assert lease.serving() and lease.epoch == 1
    finally:
        await table.close()


async def test_cl17_postgres_down_holders_serve_to_the_deadline_then_renew_the_same_epoch(
        pg_server: PgServer, pg_dsn: str) -> None:
    table = await _created(pg_dsn)
    mono = Mono()
    keeper = LeaseKeeper(table, "m1", ttl_s=10, renew_s=3, monotonic=mono)
    try:
        lease = await keeper.take(2)
        assert lease is not None
        pg_server.stop()
        try:
            mono.t += 3
            with pytest.raises(TableUnreachable):
                await keeper.renew()
            assert lease.serving() and keeper.held == {2: lease}  # to its deadline
            mono.t += 7
            assert not lease.serving()  # then unavailable
        finally:
            pg_server.start()
        assert await keeper.renew() == set()
        assert lease.serving() and lease.epoch == 1  # nobody took it: the same epoch
        assert (await table.slot_map())[2].epoch == 1
    finally:
        await table.close()


async def test_cl9_a_second_process_of_a_machine_is_refused_naming_its_pid(pg_dsn: str) -> None:
    table = await _created(pg_dsn)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE ma_machines SET host = 'elsewhere', pid = 4242, "
                         "seen_at = now() WHERE name = 'm1'")
        with pytest.raises(SettingsError, match=r"'m1' is already running .pid 4242 on elsewhere"):
            await table.register("m1", "http://x", "i1", ttl_s=10)
        with pytest.raises(SettingsError, match="not a machine of this cluster"):
            await table.register("m9", "http://x", "i1", ttl_s=10)
        await table.register("m2", "http://127.0.0.1:1", "i2", ttl_s=10)
        [_, m2] = await table.machines()
        assert m2.url == "http://127.0.0.1:1" and not m2.draining
    finally:
        await table.close()


def test_cl13_which_slots_a_machine_takes_under_each_policy() -> None:
    from mailbox_actors.cluster.lease_table import SlotRow

    def row(slot: int, home: str, holder: str | None, live: bool) -> SlotRow:
        return SlotRow(slot, home, holder, 1, live, None, None)

    slots = [row(0, "m1", None, False), row(1, "m2", "m2", False), row(2, "m2", "m2", True),
             row(3, "m1", "m2", True)]
    dead_m2 = {"m1": (True, False), "m2": (False, False)}
    assert wanted_slots("m1", "local", slots, dead_m2, set()) == [0, 3]
    assert wanted_slots("m1", "shared", slots, dead_m2, set()) == [0, 1]
    draining = {"m1": (True, False), "m2": (True, True)}
    assert wanted_slots("m1", "shared", slots, draining, set()) == [0, 1]
    assert wanted_slots("m2", "shared", slots, draining, set()) == []
    alive = {"m1": (True, False), "m2": (True, False)}
    assert handed_back("m1", "shared", [row(1, "m2", "m1", True)], alive, {1}) == [1]
    assert handed_back("m1", "local", [row(1, "m2", "m1", True)], alive, {1}) == []
