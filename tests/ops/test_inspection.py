"""Operator inspection in process (UI-1): listings by cursor, one actor's runtime view, rows, KV and
outbox, read without activating an evicted actor or changing its file; bad input refused."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest

import actors_for_tests as afs
from mailbox_actors.node.inspection import Inspector
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.inspection import Redacted

pytestmark = pytest.mark.anyio


def _file_state(path: Any) -> tuple[str, int, int]:
    st = os.stat(path)
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size


async def _evicted_scratch(rt: TestRuntime, name: str, alarm_at: int | None = None) -> str:
    oid = await afs.new_scratch(rt, name, alarm_at=alarm_at)
    await afs.scratch(rt, oid, afs.Put(k="plain_key", v="queued"))
    await afs.scratch(rt, oid, afs.Put(k="with space", v="Hello there, a subject"))
    await rt.run_in_actor("scratch", oid, lambda a, _s: a.sql.kv.put("count", 7))
    rt.node.host.evict_all_idle()
    assert not rt.node.host.is_active("scratch", oid)
    return oid


async def test_reading_an_evicted_actor_never_activates_it_nor_changes_its_file() -> None:
    """UI-1, CA-10: show, rows, KV, outbox and listing read an evicted actor's file read-only: no
    activation, and the file's bytes and mtime are as they were."""
    async with TestRuntime(objects=afs.ALL_OBJECTS) as rt:
        oid = await _evicted_scratch(rt, "a", alarm_at=rt.now_ms() + 60_000)
        path = rt.node.host.path_for("scratch", oid)
        before, activations = _file_state(path), rt.node.host.activations
        insp = rt.inspect
        detail = await insp.show_actor("scratch", oid)
        page = await insp.list_actors("scratch")
        rows = await insp.rows("scratch", oid, "items")
        kv = await insp.kv("scratch", oid)
        box = await insp.outbox("scratch", oid)
        await insp.overview()
        assert _file_state(path) == before
        assert rt.node.host.activations == activations
        assert not rt.node.host.is_active("scratch", oid)

        assert detail.active is False and detail.meta["owner_tenant"] == afs.TENANT
        assert detail.alarm.at_ms == rt.now_ms() + 60_000
        # The runtime's outbox (in every file since runtime schema 3) is shown once, by its
        # counts, not among the object's own tables.
        assert {t.name: t.rows for t in detail.tables} == {"fired": 0, "items": 2, "totals": 1}
        assert (detail.outbox_pending, detail.outbox_dispatched) == (0, 0)
        assert detail.kv_keys == 1 and detail.file_bytes == before[2]
        assert [a.id for a in page.actors] == [oid] and page.next_cursor is None
        summary = page.actors[0]
        assert (summary.tenant, summary.active, summary.file_bytes) == (afs.TENANT, False, before[2])
        assert summary.next_alarm_ms == rt.now_ms() + 60_000 and summary.schema_version == 1
        # Without content: ids and states shown, text with spaces described by its size.
        assert rows.columns == ["k", "v"]
        assert rows.rows[0] == ["plain_key", "queued"]
        assert rows.rows[1] == [Redacted("text", 10), Redacted("text", 22)]
        assert [(e.key, e.value, e.type) for e in kv.entries] == [("count", 7, "int")]
        assert box.events == [] and box.pending == 0


async def test_content_is_shown_only_when_asked() -> None:
    """UI-1, UI-4: text and bytes are shown as stored only with content=True."""
    async with TestRuntime(objects=afs.ALL_OBJECTS) as rt:
        oid = await _evicted_scratch(rt, "a")
        rows = await rt.inspect.rows("scratch", oid, "items", content=True)
        assert rows.rows[1] == ["with space", "Hello there, a subject"]


async def test_pages_follow_their_cursor_to_the_end_in_id_order() -> None:
    """UI-1: the listing pages by an opaque cursor, in id order, each actor once, ending with a
    null cursor; row pages likewise."""
    async with TestRuntime(objects=afs.ALL_OBJECTS) as rt:
        ids = sorted([await afs.new_scratch(rt, f"n{i}") for i in range(23)])
        seen: list[str] = []
        cursor = None
        while True:
            page = await rt.inspect.list_actors("scratch", cursor=cursor, limit=5)
            assert len(page.actors) <= 5
            seen += [a.id for a in page.actors]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == ids
        oid = ids[0]
        for i in range(12):
            await afs.scratch(rt, oid, afs.Put(k=f"k{i:02}", v=str(i)))
        got: list[Any] = []
        cursor = None
        while True:
            rows = await rt.inspect.rows("scratch", oid, "items", cursor=cursor, limit=5)
            got += [r[0] for r in rows.rows]
            if rows.next_cursor is None:
                break
            cursor = rows.next_cursor
        assert got == [f"k{i:02}" for i in range(12)]


async def test_a_page_shows_each_actor_its_own_meta_read_or_remembered() -> None:
    """UI-1: a page's files are read several at once; each actor is listed with its own owner,
    on the first listing (read), the second (remembered) and after its file changed (read
    again), and none of it activates an actor."""
    async with TestRuntime(objects=afs.ALL_OBJECTS) as rt:
        owners = {}
        for i in range(12):
            oid, tenant = rt.id_from_name("scratch", f"m{i}"), f"t_owner{i % 4}"
            await rt.call("scratch", oid, afs.Init(), tenant_id=tenant)
            owners[oid] = tenant
        rt.node.host.evict_all_idle()
        activations = rt.node.host.activations
        for _ in range(2):
            page = await rt.inspect.list_actors("scratch", limit=20)
            assert {a.id: a.tenant for a in page.actors} == owners
        changed = sorted(owners)[5]
        await rt.call("scratch", changed, afs.Put(k="k", v="v"), tenant_id=owners[changed])
        rt.node.host.evict_all_idle()
        activations += 1
        page = await rt.inspect.list_actors("scratch", limit=20)
        assert {a.id: a.tenant for a in page.actors} == owners
        assert all(a.schema_version == 1 for a in page.actors)
        assert rt.node.host.activations == activations


async def test_a_cursor_from_elsewhere_and_bad_parameters_are_invalid_request() -> None:
    """UI-1: a cursor of another listing, another cluster (id secret) or edited is
    invalid_request; so are an unknown namespace, a malformed id, an unknown table, a limit out
    of range; an absent actor is its namespace's not-found code (here the default,
    tenant_not_found)."""
    async with TestRuntime(objects=afs.ALL_OBJECTS) as rt:
        ids = [await afs.new_scratch(rt, f"n{i}") for i in range(3)]
        page = await rt.inspect.list_actors("scratch", limit=1)
        assert page.next_cursor is not None
        other = Inspector(rt.node)
        other.cursors = type(other.cursors)("another-cluster-secret")
        foreign = other.cursors.make("actors", "scratch", [ids[0]])
        rows_cursor = rt.inspect.cursors.make("rows", f"scratch/{ids[0]}/items", [["v", 1]])
        bad: list[Any] = [
            rt.inspect.list_actors("scratch", cursor=foreign),
            rt.inspect.list_actors("scratch", cursor=rows_cursor),
            rt.inspect.list_actors("purposes", cursor=page.next_cursor),
            rt.inspect.list_actors("scratch", cursor=page.next_cursor[:-2] + "AA"),
            rt.inspect.list_actors("scratch", cursor="not a cursor"),
            rt.inspect.list_actors("nope"),
            rt.inspect.list_actors("scratch", limit=0),
            rt.inspect.list_actors("scratch", limit=201),
            rt.inspect.show_actor("scratch", "0" * 64),
            rt.inspect.show_actor("scratch", "../etc"),
            rt.inspect.rows("scratch", ids[0], "no_such_table"),
            rt.inspect.rows("scratch", ids[0], 'items"; DROP TABLE items; --'),
            rt.inspect.rows("scratch", ids[1], "items", cursor=rows_cursor),
        ]
        for call in bad:
            with pytest.raises(MailboxActorsError) as e:
                await call
            assert e.value.code == "invalid_request", e.value.message
        missing = rt.id_from_name("scratch", "never-made")
        with pytest.raises(MailboxActorsError) as e:
            await rt.inspect.show_actor("scratch", missing)
        assert e.value.code == "tenant_not_found"  # the runtime's default not_found
        assert not rt.node.host.path_for("scratch", missing).exists()


async def test_one_actor_shows_each_purpose_and_the_outbox() -> None:
    """UI-1: each recorded alarm purpose with its due time; the outbox's pending and dispatched
    events newest first, with their counts."""
    async with TestRuntime(objects=afs.ALL_OBJECTS, control=True) as rt:
        pid = rt.id_from_name("purposes", "p")
        await rt.call("purposes", pid, afs.PInit(), tenant_id=afs.TENANT)
        now = rt.now_ms()
        await rt.call("purposes", pid, afs.Schedule(purpose="check", at_ms=now + 5_000),
                      tenant_id=afs.TENANT)
        await rt.call("purposes", pid, afs.Schedule(purpose="maintenance", at_ms=now + 9_000),
                      tenant_id=afs.TENANT)
        detail = await rt.inspect.show_actor("purposes", pid)
        assert [(p.purpose, p.due_ms, p.retries) for p in detail.alarm.purposes] == [
            ("check", now + 5_000, 0), ("maintenance", now + 9_000, 0)]
        assert detail.alarm.at_ms == now + 5_000
        overview = await rt.inspect.overview()
        counts = {c.namespace: c for c in overview.namespaces}
        assert counts["purposes"].actors == 1 and counts["purposes"].alarms_pending == 1

        quota = rt.id_from_name("tenant_quota", "ten_x")
        from mailbox_actors.wire.quota import QuotaInit
        await rt.call("tenant_quota", quota, QuotaInit(per_minute=5, per_day=10),
                      tenant_id="ten_x")
        box = await rt.inspect.outbox("tenant_quota", quota)
        assert box.pending == len([e for e in box.events if e.dispatched_at_ms is None])
        await rt.run_until_idle()
        box = await rt.inspect.outbox("tenant_quota", quota)
        assert box.pending == 0
        assert all(e.dispatched_at_ms is not None for e in box.events)
        assert [e.sequence for e in box.events] == sorted((e.sequence for e in box.events),
                                                          reverse=True)


async def test_a_mailbox_is_inspected_whole_but_a_virtual_table_has_no_rows_page() -> None:
    """UI-1: an IdentityMailbox (its FTS5 search index among its tables) shows its tables with
    counts and the messages' rows; the virtual index itself is not a table to page
    (invalid_request naming the tables there are), its shadow tables are."""
    async with TestRuntime() as rt:
        m = rt.id_from_name("identity_mailbox", "bob")
        ids = {"tenant_id": "ten_1", "identity_id": "idn_1"}
        from mailbox_actors.wire.inbound import Ingest
        from mailbox_actors.wire.mailbox import MailboxInit
        await rt.call("identity_mailbox", m, MailboxInit(), **ids)
        raw = b"From: <a@example.com>\r\nSubject: hello there\r\nMessage-ID: <x@y>\r\n\r\nhi\r\n"
        await rt.call("identity_mailbox", m, Ingest(source_id="s1", raw=raw), **ids)
        detail = await rt.inspect.show_actor("identity_mailbox", m)
        tables = {t.name: t.rows for t in detail.tables}
        assert tables["messages"] == 1 and tables["raw_chunks"] == 0  # a small source: in its row
        assert "message_search" not in tables
        rows = await rt.inspect.rows("identity_mailbox", m, "messages")
        subject = rows.columns.index("subject")
        assert rows.rows[0][subject] == Redacted("text", len("hello there"))
        with pytest.raises(MailboxActorsError) as e:
            await rt.inspect.rows("identity_mailbox", m, "message_search")
        assert e.value.code == "invalid_request" and "messages" in e.value.details["tables"]


async def test_actors_carry_the_names_the_control_database_knows() -> None:
    """UI-1: an IdentityMailbox is listed with its identity's name, a TenantQuota with its
    tenant's; an actor the control database does not know has no name."""
    from mailbox_actors.node.control_ops import create_identity

    async with TestRuntime(objects=afs.ALL_OBJECTS, control=True) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        bob = await create_identity(db, rt.node, tenant.id, "bob")
        await afs.new_scratch(rt, "a")
        mailboxes = (await rt.inspect.list_actors("identity_mailbox")).actors
        assert [(a.id, a.name, a.tenant) for a in mailboxes] == [
            (bob.mailbox_id, "bob", tenant.id)]
        quotas = (await rt.inspect.list_actors("tenant_quota")).actors
        assert [q.name for q in quotas] == ["acme"]
        assert (await rt.inspect.show_actor("identity_mailbox", bob.mailbox_id)).name == "bob"
        assert [s.name for s in (await rt.inspect.list_actors("scratch")).actors] == [None]
