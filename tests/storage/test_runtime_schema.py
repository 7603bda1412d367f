"""The runtime's own tables (RT-14, EV-1): ``_ma_meta``, ``_ma_alarm``, ``_ma_kv`` and the outbox are
made and upgraded by the runtime, one layout in every object's file, never by an object's
migrations; a file of runtime schema 2, whose object's migrations made the outbox (in its first
layout, or rebuilt lean), opens upgraded with its events, and its schema is known again."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.objects.identity_mailbox.schema import SCHEMA
from mailbox_actors.objects.tenant_quota import TenantQuota
from mailbox_actors.platform.storage.known import SOURCE_KEY, schema_source
from mailbox_actors.platform.storage.opening import (
    LAYOUT_QUERY,
    RUNTIME_TABLES,
    SchemaLayout,
    fresh_layout,
    schema_layout,
)
from mailbox_actors.platform.storage.sql import RUNTIME_SCHEMA_VERSION
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.events import EmitEvent, GetEvents
from mailbox_actors.wire.mailbox import MailboxInit
from mailbox_actors.wire.quota import QuotaInit, QuotaUsage

pytestmark = pytest.mark.anyio

# The outbox as objects' migrations made it under runtime schema 2 (the code before this layout):
# its first layout, which TenantQuota and DomainMonitor kept; IdentityMailbox rebuilt it lean.
OLD_OUTBOX_SCHEMA = (
    "CREATE TABLE outbox (sequence INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
    "type TEXT NOT NULL, occurred_at_ms INTEGER NOT NULL, body BLOB NOT NULL, "
    "dispatched_at INTEGER)",
    "CREATE INDEX outbox_undispatched ON outbox (sequence) WHERE dispatched_at IS NULL",
)
_COLUMNS = "sequence, id, type, occurred_at_ms, body, dispatched_at"


def _rows(path: Path, query: str) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def _layout(path: Path) -> SchemaLayout:
    return schema_layout(_rows(path, LAYOUT_QUERY))


def _source(path: Path) -> str | None:
    rows = _rows(path, f"SELECT v FROM _ma_meta WHERE k = '{SOURCE_KEY}'")
    return rows[0][0] if rows else None


def _steps(cls: type[Actor[Any]]) -> list[tuple[str, ...]]:
    return [m.statements for m in cls.migrations]


def _as_runtime_2(path: Path, cls: type[Actor[Any]], outbox: tuple[str, ...],
                  listed: dict[int, tuple[str, ...]]) -> None:
    """Rewrite ``path`` as the previous code left it: ``user_version`` 2, the outbox remade by
    ``outbox`` (its rows in ``_kept`` to copy; empty: no outbox, as in an object that never
    listed it) and the fingerprint that code stamped (runtime 2, the object's migrations with
    ``listed``'s outbox statements at the front of their versions)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute("ALTER TABLE outbox RENAME TO _kept")
        for stmt in outbox:
            conn.execute(stmt)
        conn.execute("DROP TABLE _kept")
        steps = _steps(cls)
        for version, statements in listed.items():
            steps[version - 1] = (*statements, *steps[version - 1])
        conn.execute("UPDATE _ma_meta SET v = ? WHERE k = ?",
                     (schema_source(cls.namespace, 2, steps), SOURCE_KEY))
        conn.execute("PRAGMA user_version = 2")
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_a_new_file_holds_the_runtime_tables_and_its_objects_own(tmp_path: Path) -> None:
    """RT-14, OBJ-1: a file the runtime makes for IdentityMailbox has exactly the runtime's tables
    (the outbox among them, keyed by its sequence alone) and ``schema.SCHEMA``; no object's
    migrations make an outbox."""
    async with TestRuntime(tmp_path) as rt:
        mid = rt.id_from_name("identity_mailbox", "m")
        await rt.call("identity_mailbox", mid, MailboxInit(), tenant_id="t", identity_id="i")
        path = rt.node.host.path_for("identity_mailbox", mid)
        assert _layout(path) == fresh_layout(SCHEMA)
        assert fresh_layout(SCHEMA) == fresh_layout([s for m in IdentityMailbox.migrations
                                                     for s in m.statements])
    assert _rows(path, "PRAGMA user_version") == [(RUNTIME_SCHEMA_VERSION,)]
    assert _rows(path, "SELECT name FROM sqlite_master WHERE tbl_name = 'outbox'") == [("outbox",)]


def test_no_platform_object_lists_the_outbox() -> None:
    """RT-14: the outbox is the runtime's: no platform object's migrations create or rebuild it."""
    from mailbox_actors.objects import DEFAULT_OBJECTS
    for cls in DEFAULT_OBJECTS:
        for m in cls.migrations:
            assert not any("outbox" in s.lower() for s in m.statements), (cls, m.version)
    assert any("outbox" in s for s in RUNTIME_TABLES)


async def test_a_runtime_2_file_with_the_first_outbox_layout_opens_upgraded(
        tmp_path: Path) -> None:
    """RT-14, EV-1, EV-3: a TenantQuota file of runtime schema 2 whose migration 2 made the
    outbox in its first layout (a UNIQUE event id, an index on the undispatched), with one event
    published and one not, opens with today's code: the outbox is rebuilt in the runtime's layout
    with both events, the undispatched one is published once, the sequence goes on, the dispatched
    one is left to the runtime's prune, and the file carries the fingerprint of its schema again
    (its schema is known: not screened anew)."""
    async with TestRuntime(tmp_path) as rt:
        q = rt.id_from_name("tenant_quota", "t1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=10, per_day=100), tenant_id="t1")
        await rt.run_until_idle()  # quota.created goes out
        await rt.call("tenant_quota", q, QuotaInit(per_minute=20, per_day=100), tenant_id="t1")
        path = rt.node.host.path_for("tenant_quota", q)
        fresh = _layout(path)
    events = _rows(path, f"SELECT {_COLUMNS} FROM outbox ORDER BY sequence")
    assert [(e[2], e[5] is None) for e in events] == [("quota.created", False),
                                                      ("quota.limits_changed", True)]
    _as_runtime_2(path, TenantQuota, (
        *OLD_OUTBOX_SCHEMA, f"INSERT INTO outbox ({_COLUMNS}) SELECT {_COLUMNS} FROM _kept"),
        {2: OLD_OUTBOX_SCHEMA})
    assert {r[0] for r in _rows(path, "SELECT name FROM sqlite_master WHERE type = 'index' "
                                      "AND tbl_name = 'outbox'")} == {
        "outbox_undispatched", "sqlite_autoindex_outbox_1"}

    async with TestRuntime(tmp_path) as rt:
        usage = await rt.call("tenant_quota", q, QuotaUsage(), tenant_id="t1")
        assert usage["minute_limit"] == 20
        # Its dispatched event is pruned by the runtime's purpose from now on (EV-4).
        assert _rows(path, "SELECT v FROM _ma_meta WHERE k = 'alarm:outbox_prune'") == [
            (str(rt.now_ms() + 86_400_000),)]
        await rt.run_until_idle()
        assert [ev.type for ev in rt.events.events()] == ["quota.limits_changed"]
        await rt.call("tenant_quota", q, QuotaInit(per_minute=30, per_day=100), tenant_id="t1")
        await rt.run_until_idle()
        assert [(ev.type, ev.sequence) for ev in rt.events.events()] == [
            ("quota.limits_changed", 2), ("quota.limits_changed", 3)]
    assert _layout(path) == fresh
    assert _rows(path, "PRAGMA user_version") == [(RUNTIME_SCHEMA_VERSION,)]
    assert _rows(path, f"SELECT {_COLUMNS} FROM outbox ORDER BY sequence")[:1] == events[:1]
    assert _source(path) == schema_source("tenant_quota", RUNTIME_SCHEMA_VERSION,
                                          _steps(TenantQuota))


async def test_a_runtime_2_mailbox_whose_migrations_rebuilt_the_outbox_lean_keeps_its_events(
        tmp_path: Path) -> None:
    """RT-14, EV-4: an IdentityMailbox of runtime schema 2 (its migration 8 rebuilt the outbox
    lean, so SQLite keeps the table's name quoted) opens with today's code: the table is kept as
    it is, its events read back in order, and the sequence goes on."""
    async with TestRuntime(tmp_path) as rt:
        mid = rt.id_from_name("identity_mailbox", "m")
        await rt.call("identity_mailbox", mid, MailboxInit(), tenant_id="t", identity_id="i")
        await rt.call("identity_mailbox", mid, EmitEvent(type="identity.updated", data={"n": 1}),
                      tenant_id="t", identity_id="i")
        path = rt.node.host.path_for("identity_mailbox", mid)
        fresh = _layout(path)
    lean = ("CREATE TABLE outbox_lean (sequence INTEGER PRIMARY KEY, id TEXT NOT NULL, "
            "type TEXT NOT NULL, occurred_at_ms INTEGER NOT NULL, body BLOB NOT NULL, "
            "dispatched_at INTEGER)",
            f"INSERT INTO outbox_lean ({_COLUMNS}) SELECT {_COLUMNS} FROM _kept",
            "ALTER TABLE outbox_lean RENAME TO outbox")
    before = _rows(path, f"SELECT {_COLUMNS} FROM outbox ORDER BY sequence")
    # Migration 2 made it in the first layout, migration 8 rebuilt it lean (OUTBOX_LEAN).
    _as_runtime_2(path, IdentityMailbox, lean, {2: OLD_OUTBOX_SCHEMA, 8: lean})
    assert _rows(path, "SELECT sql FROM sqlite_master WHERE name = 'outbox'")[0][0].startswith(
        'CREATE TABLE "outbox"')

    async with TestRuntime(tmp_path) as rt:
        await rt.call("identity_mailbox", mid, EmitEvent(type="identity.updated", data={"n": 2}),
                      tenant_id="t", identity_id="i")
        got = await rt.call("identity_mailbox", mid, GetEvents(limit=10), tenant_id="t",
                            identity_id="i")
        assert [(e["sequence"], e["type"]) for e in got["events"]] == [
            (1, "identity.created"), (2, "identity.updated"), (3, "identity.updated")]
    assert _rows(path, f"SELECT {_COLUMNS} FROM outbox ORDER BY sequence")[:2] == before
    assert _layout(path) == fresh
    assert _source(path) == schema_source("identity_mailbox", RUNTIME_SCHEMA_VERSION,
                                          _steps(IdentityMailbox))


async def test_a_runtime_2_file_without_an_outbox_gets_one(tmp_path: Path) -> None:
    """RT-14: a file of an object that never listed the outbox gets the runtime's at its open,
    and can emit."""
    afs.reset_state()
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "s")
        path = rt.node.host.path_for("scratch", oid)
        fresh = _layout(path)
    _as_runtime_2(path, afs.Scratch, (), {})
    assert "outbox" not in {r[1] for r in _layout(path)}
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        await afs.new_scratch(rt, "s")
    assert _layout(path) == fresh
    assert _rows(path, "PRAGMA user_version") == [(RUNTIME_SCHEMA_VERSION,)]


async def test_a_runtime_2_file_with_its_own_table_named_outbox_is_refused(
        tmp_path: Path) -> None:
    """RT-14, OPS-2: a table named ``outbox`` that is not an outbox (the actor's own) is never
    taken over: the file is refused as damaged for this code, and left as it was."""
    afs.reset_state()
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "s")
        path = rt.node.host.path_for("scratch", oid)
    _as_runtime_2(path, afs.Scratch, ("CREATE TABLE outbox (letter TEXT)",), {})
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        with pytest.raises(MailboxActorsError) as e:
            await afs.new_scratch(rt, "s")
        assert e.value.code == "internal_error"
    assert _rows(path, "PRAGMA user_version") == [(2,)]
    assert _rows(path, "PRAGMA table_info(outbox)")[0][1] == "letter"
