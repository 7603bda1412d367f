"""CL-10, CL-11: the slot epoch in the actor file. The first write of an activation stamps the
lease's epoch into ``_ma_meta``; a commit after a newer holder wrote is refused (unavailable) and
the actor reset; a file stamped newer than the lease is refused (internal_error), never
downgraded; nothing commits once the lease deadline passed. The newer holder is another
connection to the same file, as a machine on shared storage is."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import TENANT, Dump, Init, Put, Run, Scratch
from mailbox_actors.node.node import Node
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.services import Services
from mailbox_actors.platform.storage.fence import SLOT_FENCE, EpochFence
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

pytestmark = pytest.mark.anyio


class Lease:
    def __init__(self, slot: int, epoch: int) -> None:
        self.slot, self.epoch, self.ok = slot, epoch, True
        self.asked = 0

    def serving(self) -> bool:
        self.asked += 1
        return self.ok


def _node(tmp_path: Path, lease: Lease, *, checks: bool = True) -> Node:
    return Node(RuntimeSettings(data_dir=str(tmp_path)), clock=FakeClock(), objects=[Scratch],
                services=Services({SLOT_FENCE: EpochFence(lease, checks=checks)}))


def _stamp(path: Path) -> str | None:
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT v FROM _ma_meta WHERE k = 'slot_epoch'").fetchone()
    return None if row is None else str(row[0])


async def test_cl11_first_write_stamps_the_epoch_and_a_newer_holder_fences_the_old(
        tmp_path: Path) -> None:
    lease = Lease(3, 7)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "a")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        path = node.host.path_for("scratch", oid)
        assert _stamp(path) == "7"
        await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        # Another machine took the slot (epoch 8) and wrote the file through shared storage.
        with sqlite3.connect(path) as other:
            other.execute("UPDATE _ma_meta SET v = '8' WHERE k = 'slot_epoch'")
            other.execute("INSERT INTO items (k, v) VALUES ('y', 'new holder')")
        with pytest.raises(MailboxActorsError) as e:
            await node.call("scratch", oid, Put(k="z", v="old", tx=False), tenant_id=TENANT)
        assert e.value.code == ErrorCode.UNAVAILABLE and e.value.retryable
        assert e.value.details == {"slot": 3, "epoch": 7}
        assert not node.host.is_active("scratch", oid)  # the actor was reset
        # Opened again under the old lease, the file is newer than the lease: refused.
        with pytest.raises(MailboxActorsError) as e:
            await node.call("scratch", oid, Put(k="z", v="old"), tenant_id=TENANT)
        assert e.value.code == ErrorCode.INTERNAL_ERROR
        with sqlite3.connect(path) as conn:
            assert [r[0] for r in conn.execute("SELECT k FROM items ORDER BY k")] == ["x", "y"]
        assert _stamp(path) == "8"  # never downgraded


async def test_cl11_an_explicit_transaction_after_a_newer_holder_is_refused(
        tmp_path: Path) -> None:
    lease = Lease(1, 1)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "t")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        with sqlite3.connect(node.host.path_for("scratch", oid)) as other:
            other.execute("UPDATE _ma_meta SET v = '2' WHERE k = 'slot_epoch'")
        with pytest.raises(MailboxActorsError) as e:
            await node.call("scratch", oid, Put(k="z", v="old"), tenant_id=TENANT)
        assert e.value.code == ErrorCode.UNAVAILABLE
        assert not node.host.is_active("scratch", oid)


async def test_cl11_a_file_stamped_newer_than_the_lease_is_refused_not_downgraded(
        tmp_path: Path) -> None:
    lease = Lease(0, 2)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "b")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        path = node.host.path_for("scratch", oid)
        node.host.evict_all_idle()
        with sqlite3.connect(path) as other:
            other.execute("UPDATE _ma_meta SET v = '5' WHERE k = 'slot_epoch'")
        with pytest.raises(MailboxActorsError) as e:
            await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        assert e.value.code == ErrorCode.INTERNAL_ERROR
        assert e.value.details == {"slot": 0, "epoch": 2, "file_epoch": 5}
        assert _stamp(path) == "5"
        # Reads need no lease check of the file: the stamp is for writes.
        assert (await node.call("scratch", oid, Dump(), tenant_id=TENANT))["keys"] == []


async def test_cl10_nothing_commits_once_the_lease_no_longer_serves(tmp_path: Path) -> None:
    lease = Lease(4, 1)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "c")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        lease.ok = False  # the monotonic deadline passed (or the renewal said it was lost)
        with pytest.raises(MailboxActorsError) as e:
            await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        assert e.value.code == ErrorCode.UNAVAILABLE
        assert e.value.details == {"slot": 4, "epoch": 1}
        lease.ok = True  # renewed at the same epoch (CL-17): writes go through again
        await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        assert (await node.call("scratch", oid, Dump(), tenant_id=TENANT))["keys"] == ["x"]


@pytest.mark.parametrize("tx", [True, False])
async def test_cl10_every_transaction_asks_the_lease_while_the_stamp_stands(
        tmp_path: Path, tx: bool) -> None:
    """CL-10: once the stamp was seen, a transaction reads no stamp (the file's data version did
    not move) but still asks the lease, every one, explicit or implicit: a lease lost between
    two writes refuses the second, with nothing of it committed."""
    lease = Lease(2, 6)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "ask")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        for i in range(5):
            before = lease.asked
            await node.call("scratch", oid, Put(k=f"k{i}", v="1", tx=tx), tenant_id=TENANT)
            assert lease.asked > before
        lease.ok = False
        with pytest.raises(MailboxActorsError) as e:
            await node.call("scratch", oid, Put(k="late", v="1", tx=tx), tenant_id=TENANT)
        assert e.value.code == ErrorCode.UNAVAILABLE
        assert e.value.details == {"slot": 2, "epoch": 6}
        lease.ok = True
        keys = (await node.call("scratch", oid, Dump(), tenant_id=TENANT))["keys"]
        assert "late" not in keys and len(keys) == 5


async def test_cl11_without_checks_nothing_is_stamped_or_refused(tmp_path: Path) -> None:
    """The fence with ``checks=False`` (the fault test's run without it): a lost lease refuses
    nothing and the file is never stamped."""
    lease = Lease(1, 9)
    async with _node(tmp_path, lease, checks=False) as node:
        oid = node.id_from_name("scratch", "off")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        lease.ok = False
        await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        await node.call("scratch", oid, Put(k="y", v="1", tx=False), tenant_id=TENANT)
        assert _stamp(node.host.path_for("scratch", oid)) is None
        assert lease.asked == 0


async def test_cl11_a_stamp_that_rolled_back_is_written_again_by_the_next_transaction(
        tmp_path: Path) -> None:
    """CL-11: the fence reads the file again after a transaction that stamped it, so a stamp
    undone by its transaction's rollback is written by the next one: an older holder of the
    slot (a paused process) can never find its own epoch there and commit after a newer one."""

    async def put_then_fail(actor: Any, call: Any, arg: Any) -> None:
        def fail(tx: Any) -> None:
            tx.exec("INSERT INTO items (k, v) VALUES ('lost', '1')")
            raise RuntimeError("the transaction fails after the stamp")
        actor.sql.transaction_sync(fail)

    afs.HOOKS["put_then_fail"] = put_then_fail
    lease = Lease(2, 6)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "r")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        path = node.host.path_for("scratch", oid)
        node.host.evict_all_idle()
        lease.epoch = 7  # the slot was taken again (a restart): a new epoch
        with pytest.raises(MailboxActorsError):
            await node.call("scratch", oid, Run(hook="put_then_fail"), tenant_id=TENANT)
        assert _stamp(path) == "6"  # the stamp went with the rollback
        await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        assert _stamp(path) == "7"


@pytest.mark.parametrize("nested", [False, True])
async def test_cl11_after_delete_all_the_next_write_reads_the_file_again(tmp_path: Path,
                                                                         nested: bool) -> None:
    """CL-11: ``delete_all`` removes the stamp with the rest of ``_ma_meta``, alone or nested in a
    transaction; a write after it in the same activation is not let through on what the fence
    saw before (no other connection touched the file, so its data version did not move): the
    fence reads the file again and stamps the lease's epoch again."""

    async def wipe_then_write(actor: Any, call: Any, arg: Any) -> str | None:
        if nested:
            actor.sql.transaction_sync(lambda tx: tx.delete_all())
        else:
            actor.sql.delete_all()
        actor.sql.transaction_sync(lambda tx: tx.exec("CREATE TABLE after_wipe (x)"))
        rows = actor.sql._sys("SELECT v FROM _ma_meta WHERE k = 'slot_epoch'").fetchall()
        return str(rows[0][0]) if rows else None

    afs.HOOKS["wipe_then_write"] = wipe_then_write
    lease = Lease(5, 3)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "w")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        assert await node.call("scratch", oid, Run(hook="wipe_then_write"),
                               tenant_id=TENANT) == "3"


def _newer_holder_writes(path: Path, epoch: int) -> None:
    """Another machine took the slot and wrote the file through shared storage."""
    with sqlite3.connect(path) as other:
        other.execute("UPDATE _ma_meta SET v = ? WHERE k = 'slot_epoch'", (str(epoch),))
        other.execute("INSERT OR REPLACE INTO items (k, v) VALUES ('new', 'holder')")


async def test_cl11_a_read_only_transaction_after_a_newer_holder_is_refused(tmp_path: Path) -> None:
    """CL-11: a transaction that only reads is fenced too: after a newer holder wrote the file,
    what it read there is not answered (``unavailable``) and the actor is reset."""

    async def read_in_tx(actor: Any, call: Any, arg: Any) -> list[str]:
        return actor.sql.transaction_sync(
            lambda tx: [r[0] for r in tx.exec("SELECT k FROM items ORDER BY k")])

    afs.HOOKS["read_in_tx"] = read_in_tx
    lease = Lease(2, 4)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "ro")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        assert await node.call("scratch", oid, Run(hook="read_in_tx"), tenant_id=TENANT) == ["x"]
        _newer_holder_writes(node.host.path_for("scratch", oid), 5)
        with pytest.raises(MailboxActorsError) as e:
            await node.call("scratch", oid, Run(hook="read_in_tx"), tenant_id=TENANT)
        assert e.value.code == ErrorCode.UNAVAILABLE
        assert e.value.details == {"slot": 2, "epoch": 4}
        assert not node.host.is_active("scratch", oid)


@pytest.mark.parametrize("awaiting", [False, True])
async def test_cl11_a_newer_holder_between_two_transactions_of_one_request_is_refused(
        tmp_path: Path, awaiting: bool) -> None:
    """CL-11: a newer holder writing between two transactions of the same activation (nothing
    undone in between: only the file can tell) refuses the second, explicit or awaiting
    (``ctx.transaction``); nothing of it commits."""

    async def write_newer_write(actor: Any, call: Any, arg: Any) -> None:
        actor.sql.transaction_sync(lambda tx: tx.exec("INSERT INTO items (k, v) VALUES ('a', '1')"))
        _newer_holder_writes(arg, 9)
        if not awaiting:
            actor.sql.transaction_sync(
                lambda tx: tx.exec("INSERT INTO items (k, v) VALUES ('b', 'old')"))
            return

        async def second(tx: Any) -> None:
            tx.exec("INSERT INTO items (k, v) VALUES ('b', 'old')")
        await actor.ctx.transaction(second)

    afs.HOOKS["write_newer_write"] = write_newer_write
    lease = Lease(6, 8)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "between")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        path = node.host.path_for("scratch", oid)
        with pytest.raises(MailboxActorsError) as e:
            await node.call("scratch", oid, Run(hook="write_newer_write", arg=str(path)),
                            tenant_id=TENANT)
        assert e.value.code == ErrorCode.UNAVAILABLE
        assert e.value.details == {"slot": 6, "epoch": 8}
        assert not node.host.is_active("scratch", oid)
        with sqlite3.connect(path) as conn:
            assert [r[0] for r in conn.execute("SELECT k FROM items ORDER BY k")] == ["a", "new"]
        assert _stamp(path) == "9"


async def test_cl11_a_wipe_that_meets_another_commit_does_not_stamp_the_file_again(
        tmp_path: Path) -> None:
    """CL-11, RT-15: when another connection committed to the file (here without touching the
    stamp) just before ``delete_all``, the fence reads the stamp again and lets the wipe
    through (the stamp was the lease's); the stamp the wipe removed is not written back (the
    file is as one never created)."""

    async def commit_then_wipe(actor: Any, call: Any, arg: Any) -> None:
        with sqlite3.connect(arg) as other:
            other.execute("INSERT INTO items (k, v) VALUES ('other', 'commit')")
        actor.sql.delete_all()

    afs.HOOKS["commit_then_wipe"] = commit_then_wipe
    lease = Lease(1, 3)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "wipe")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        await node.call("scratch", oid, Put(k="x", v="1"), tenant_id=TENANT)
        path = node.host.path_for("scratch", oid)
        await node.call("scratch", oid, Run(hook="commit_then_wipe", arg=str(path)),
                        tenant_id=TENANT)
        assert not path.exists() or _stamp(path) is None


async def test_cl11_another_commit_that_keeps_the_stamp_lets_writes_through(
        tmp_path: Path) -> None:
    """CL-11: a commit by another connection that leaves the lease's epoch stamped (a tool on
    the same host) makes the fence read the stamp, which lets the write through, and the
    writes after it too."""
    lease = Lease(0, 2)
    async with _node(tmp_path, lease) as node:
        oid = node.id_from_name("scratch", "keep")
        await node.call("scratch", oid, Init(), tenant_id=TENANT)
        path = node.host.path_for("scratch", oid)
        for i, tx in enumerate((True, False, True)):
            with sqlite3.connect(path) as other:
                other.execute("INSERT OR REPLACE INTO items (k, v) VALUES (?, 'tool')", (f"t{i}",))
            await node.call("scratch", oid, Put(k=f"x{i}", v="1", tx=tx), tenant_id=TENANT)
            await node.call("scratch", oid, Put(k=f"y{i}", v="1", tx=tx), tenant_id=TENANT)
        assert _stamp(path) == "2"
        assert len((await node.call("scratch", oid, Dump(), tenant_id=TENANT))["keys"]) == 9
