"""The runtime's own state is out of reach of actor SQL (RT-14), and files written with the
earlier layout (the runtime's keys in a user-visible ``meta``) keep working (RT-8, RT-14)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import TENANT, Scratch
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.platform.storage.sql import RUNTIME_SCHEMA_VERSION
from mailbox_actors.runtime.actor import Call
from mailbox_actors.runtime.migrations import PLATFORM_META
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.mailbox import MailboxInit, MailboxStatus
from old_layout import table_rows, to_previous_layout


@pytest.fixture(autouse=True)
def _clean() -> None:
    afs.reset_state()


@pytest.mark.anyio
async def test_a_user_actor_creates_its_own_meta_and_cannot_touch_the_runtimes(
        tmp_path: Path) -> None:
    """RT-14: a fresh actor sees no table it did not create, so its own
    ``CREATE TABLE IF NOT EXISTS meta (...)`` makes the table it asked for; writing
    ``schema_version`` = 99 into it changes nothing for the runtime; the runtime's _ma_meta can be
    neither read nor written."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def own_meta(actor: Scratch, call: Call, arg: Any) -> Any:
            sql = actor.sql
            before = sorted(r[0] for r in sql.exec(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_%' "
                "ESCAPE '\\'"))
            sql.exec("CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY, note TEXT, k, v)")
            sql.exec("INSERT INTO meta (note, k, v) VALUES ('mine', 'schema_version', '99')")
            return {"before": before, "cols": [r[1] for r in sql.exec("PRAGMA table_info(meta)")]}

        out = await afs.run(rt, oid, own_meta)
        assert "meta" not in out["before"]
        assert out["cols"] == ["id", "note", "k", "v"]
        for stmt in ("SELECT * FROM _ma_meta", "UPDATE _ma_meta SET v = '99'",
                     "INSERT INTO _ma_meta VALUES ('owner_tenant', 'thief')",
                     "DELETE FROM _ma_meta", "DROP TABLE _ma_meta",
                     "ALTER TABLE _ma_meta RENAME TO x", "CREATE INDEX i ON _ma_meta (v)"):
            with pytest.raises(MailboxActorsError) as e:
                await afs.run(rt, oid, afs_exec, stmt)
            assert e.value.code == "invalid_request", stmt
        # The actor still answers: its schema version and owner are the runtime's, not meta's.
        await afs.scratch(rt, oid, afs.Put(k="after", v="1"))
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["after"]


async def afs_exec(actor: Scratch, call: Call, arg: Any) -> Any:
    return [list(r) for r in actor.sql.exec(arg)]


@pytest.mark.anyio
async def test_a_file_of_the_previous_layout_keeps_its_owner_alarm_and_the_actors_own_keys(
        tmp_path: Path) -> None:
    """RT-14, RT-8: a file written by the previous runtime schema (owner, schema version and alarm
    purposes in ``meta``) opens: its owner still guards it, its alarm still fires, the keys the
    actor itself wrote into that ``meta`` stay there, and the runtime's keys move out of it."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "old", alarm_at=rt.now_ms() + 60_000)
        await afs.scratch(rt, oid, afs.Put(k="kept", v="1"))
        path = rt.node.host.path_for("scratch", oid)
    to_previous_layout(path, extra={"color": "blue"})
    assert ("owner_tenant", TENANT) in table_rows(path, "SELECT k, v FROM meta")

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["kept"]
        with pytest.raises(MailboxActorsError) as e:
            await rt.call("scratch", oid, afs.Dump(), tenant_id="someone_else")
        assert e.value.code == "internal_error"  # the owner check of RPC-3, from the old meta
        await rt.advance(60_000)
        assert [s.object_id for s in afs.ALARM_LOG] == [oid]
    assert table_rows(path, "SELECT k, v FROM meta") == [("color", "blue")]
    assert ("owner_tenant", TENANT) in table_rows(path, "SELECT k, v FROM _ma_meta")
    assert table_rows(path, "PRAGMA user_version") == [(RUNTIME_SCHEMA_VERSION,)]


@pytest.mark.anyio
async def test_a_platform_object_of_the_previous_layout_keeps_its_meta(tmp_path: Path) -> None:
    """RT-14, RT-8: an IdentityMailbox file of the previous layout (every key in meta, the
    PLATFORM_META migration not yet run) is migrated on first access: it keeps a ``meta(k, v)``
    with its own size_bytes, the runtime's keys leave it, and status reports the new version."""
    ids = {"tenant_id": "t1", "identity_id": "i1"}
    latest = len(IdentityMailbox.migrations)
    platform_meta = next(m.version for m in IdentityMailbox.migrations
                         if m.statements == PLATFORM_META)

    class PreviousMailbox(IdentityMailbox):  # the code as it was before PLATFORM_META
        migrations = IdentityMailbox.migrations[:platform_meta - 1]

    previous = [PreviousMailbox if c is IdentityMailbox else c for c in DEFAULT_OBJECTS]
    async with TestRuntime(tmp_path, objects=previous) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **ids)
        await rt.run_until_idle()
        path = rt.node.host.path_for("identity_mailbox", m)
    to_previous_layout(path, extra={"size_bytes": "4096"})  # one meta, the runtime's

    async with TestRuntime(tmp_path) as rt:
        st = await rt.call("identity_mailbox", m, MailboxStatus(), **ids)
        assert (st["tenant_id"], st["identity_id"], st["schema_version"]) == ("t1", "i1", latest)
        with pytest.raises(MailboxActorsError) as e:
            await rt.call("identity_mailbox", m, MailboxStatus(), tenant_id="t1",
                          identity_id="other")
        assert e.value.code == "internal_error"
    assert table_rows(path, "SELECT k, v FROM meta") == [("size_bytes", "4096")]
    assert ("schema_version", str(latest)) in table_rows(path, "SELECT k, v FROM _ma_meta")
