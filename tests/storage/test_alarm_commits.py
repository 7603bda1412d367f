"""What an alarm run commits (AL-3, RT-2; ADR 0012): the fired alarm's removal joins the handler's
own open writes (one commit); the purposes' runner ends a run in one transaction; a handler that
committed its writes itself gets the removal in a commit that is never synced, so
``durability=full`` pays one fsync per run, and the file's setting is back to FULL after.

Commits are counted in the actor's write-ahead log, which closing keeps: every commit is one frame
whose header records the database size (other frames record zero), under the log's current salt.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest

import actors_for_tests as afs
from mailbox_actors.runtime.actor import Actor, AlarmInfo, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.events import EmitEvent
from mailbox_actors.wire.mailbox import MailboxInit


def wal_commits(path: Path) -> int:
    """Commit frames in ``path``'s log (those of its current generation)."""
    wal = path.with_name(path.name + "-wal").read_bytes()
    if len(wal) < 32:
        return 0
    page_size = struct.unpack(">I", wal[8:12])[0]
    salts = wal[16:24]
    commits, off = 0, 32
    while off + 24 + page_size <= len(wal):
        header = wal[off:off + 24]
        if header[8:16] != salts:
            break  # a frame of an earlier generation: the log ends here
        commits += struct.unpack(">I", header[4:8])[0] != 0
        off += 24 + page_size
    return commits


class CInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    at_ms: int


class Counter(Actor):
    """Its alarm handler writes without a transaction of its own (an implicit one)."""

    namespace = "counter"
    requests = CInit
    init_request = CInit
    migrations = (Migration(1, ("CREATE TABLE c (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)",)),)

    async def handle(self, call: Call, req: Any) -> Any:
        def init(tx: Any) -> None:
            self.ctx.claim_owner(call)
            tx.exec("INSERT OR IGNORE INTO c (id, n) VALUES (1, 0)")
            tx.set_alarm(req.at_ms)
        self.sql.transaction_sync(init)

    async def alarm(self, info: AlarmInfo) -> None:
        self.sql.exec("UPDATE c SET n = n + 1 WHERE id = 1")
        self.sql.exec("UPDATE c SET n = n + 1 WHERE id = 1")


@pytest.mark.anyio
async def test_a_handlers_implicit_writes_and_the_alarms_removal_are_one_commit(
        tmp_path: Path) -> None:
    """AL-3: the handler's writes and the fired alarm's removal commit together, once."""
    async with TestRuntime(tmp_path, durability="full", objects=(Counter,)) as rt:
        oid = rt.id_from_name("counter", "c")
        await rt.call("counter", oid, CInit(at_ms=rt.now_ms() + 1_000), tenant_id=afs.TENANT)
        path = rt.node.host.path_for("counter", oid)
        before = wal_commits(path)
        await rt.advance(1_000)
        assert wal_commits(path) == before + 1
        act = rt.node.host._active[("counter", oid)]
        assert act.runtime_storage.stored_alarm() is None
        assert act.runtime_storage.sql.exec("SELECT n FROM c").one()[0] == 2


@pytest.mark.anyio
async def test_the_purposes_runner_ends_a_run_in_one_transaction(tmp_path: Path) -> None:
    """AL-2, AL-3: a purpose whose method commits once costs two commits in all: its own, and
    one that clears the purpose and removes the fired alarm together."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = rt.id_from_name("purposes", "p")
        await rt.call("purposes", oid, afs.PInit(), tenant_id=afs.TENANT)
        await rt.call("purposes", oid, afs.Schedule(purpose="check", at_ms=rt.now_ms() + 1_000),
                      tenant_id=afs.TENANT)
        path = rt.node.host.path_for("purposes", oid)
        before = wal_commits(path)
        await rt.advance(1_000)
        assert [p for _, p, _ in afs.PURPOSE_LOG] == ["check"]
        assert wal_commits(path) == before + 2
        state = await rt.call("purposes", oid, afs.PState(), tenant_id=afs.TENANT)
        assert state == {"alarm": None, "scheduled": {}}


@pytest.mark.anyio
async def test_a_removal_after_the_handlers_own_commit_is_not_synced(tmp_path: Path) -> None:
    """RT-2: after a handler that committed its own transaction, the alarm's removal is a commit
    of its own made with synchronous=OFF (one fsync per run), and the file is back to FULL; the
    alarm is gone from the file and does not run again."""
    async with TestRuntime(tmp_path, durability="full", objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "s", alarm_at=rt.now_ms() + 1_000)
        path = rt.node.host.path_for("scratch", oid)
        before = wal_commits(path)
        await rt.advance(1_000)
        assert len(afs.ALARM_LOG) == 1
        assert wal_commits(path) == before + 2
        sql = rt.node.host._active[("scratch", oid)].runtime_storage.sql
        assert sql.file_setting("synchronous") == 2  # FULL again
        assert sql._sys("SELECT count(*) FROM _ma_alarm").fetchone()[0] == 0
        await rt.advance(60_000)
        assert len(afs.ALARM_LOG) == 1


@pytest.mark.anyio
async def test_an_outbox_run_marks_its_events_in_the_runs_one_commit(tmp_path: Path) -> None:
    """EV-2, AL-3: the outbox alarm publishes the undispatched events, and marking them
    dispatched, clearing the outbox purpose and re-arming to maintenance is one commit (a crash
    before it publishes them again: at least once, EV-3)."""
    async with TestRuntime(tmp_path, durability="full") as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        ids = {"tenant_id": "t1", "identity_id": "i1"}
        await rt.call("identity_mailbox", m, MailboxInit(), **ids)
        await rt.run_until_idle()  # identity.created out, and what init starts besides
        for i in range(3):
            await rt.call("identity_mailbox", m, EmitEvent(type="identity.updated",
                                                           data={"n": i}), **ids)
        path = rt.node.host.path_for("identity_mailbox", m)
        before = wal_commits(path)
        await rt.run_until_idle()
        assert [e.sequence for e in rt.events.events()] == [1, 2, 3, 4]
        assert wal_commits(path) == before + 1  # was 2: the marking committed on its own
        sql = rt.node.host._active[("identity_mailbox", m)].runtime_storage.sql
        assert sql.exec("SELECT count(*) FROM outbox WHERE dispatched_at IS NULL").one()[0] == 0
        await rt.run_until_idle()
        assert len(rt.events.published) == 4  # dispatched once
