"""Owner checks (RPC-3), erasure (RPC-4) and deadlines (RPC-5) on the in-process RPC path."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.rpc.router import default_deadline_ms
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.domain import DomainInit, DomainStatus
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.inbound import Ingest
from mailbox_actors.wire.mailbox import MailboxErase, MailboxInit, MailboxStatus
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaStatus, QuotaUsage


async def code(coro: Any) -> str:
    try:
        await coro
    except MailboxActorsError as e:
        return e.code.value
    return "ok"


def mismatches(rt: TestRuntime, ns: str) -> float:
    return rt.node.metrics.get("rpc_owner_mismatch_total", (("namespace", ns),))


# ---- RPC-3 ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_init_stores_the_owner_and_repeats_idempotently(tmp_path: Path) -> None:
    """RPC-3: init stores the owner; a repeated init by the same owner succeeds without change;
    init without the owner ids in the envelope is invalid_request."""
    async with TestRuntime(tmp_path) as rt:
        q = rt.id_from_name("tenant_quota", "t1")
        assert await rt.call("tenant_quota", q, QuotaInit(per_minute=1, per_day=2),
                             tenant_id="t1") == {"created": True}
        assert await rt.call("tenant_quota", q, QuotaInit(per_minute=1, per_day=2),
                             tenant_id="t1") == {"created": False}
        m = rt.id_from_name("identity_mailbox", "i1")
        assert await rt.call("identity_mailbox", m, MailboxInit(), tenant_id="t1",
                             identity_id="i1") == {"created": True}
        assert await rt.call("identity_mailbox", m, MailboxInit(), tenant_id="t1",
                             identity_id="i1") == {"created": False}
        status = await rt.call("identity_mailbox", m, MailboxStatus(), tenant_id="t1",
                               identity_id="i1")
        assert (status["tenant_id"], status["identity_id"]) == ("t1", "i1")

        fresh = rt.id_from_name("identity_mailbox", "i2")
        assert await code(rt.call("identity_mailbox", fresh, MailboxInit(),
                                  tenant_id="t1")) == "invalid_request"
        assert await code(rt.call("tenant_quota", rt.id_from_name("tenant_quota", "x"),
                                  QuotaInit(per_minute=1, per_day=1))) == "invalid_request"
        assert await code(rt.call("identity_mailbox", fresh, MailboxStatus(), tenant_id="t1",
                                  identity_id="i2")) == "identity_not_found"


@pytest.mark.anyio
async def test_owner_mismatch_is_internal_error_logged_and_counted(tmp_path: Path) -> None:
    """RPC-3: a call whose tenant (or identity) differs from the stored owner gets internal_error,
    logs the security event rpc_owner_mismatch with both ids, and increments
    rpc_owner_mismatch_total; the object is unchanged."""
    async with TestRuntime(tmp_path) as rt:
        q = rt.id_from_name("tenant_quota", "t1")
        m = rt.id_from_name("identity_mailbox", "i1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=5, per_day=9), tenant_id="t1")
        await rt.call("identity_mailbox", m, MailboxInit(), tenant_id="t1", identity_id="i1")

        with structlog.testing.capture_logs() as logs:
            assert await code(rt.call("tenant_quota", q, QuotaStatus(),
                                      tenant_id="t2")) == "internal_error"
            assert await code(rt.call("tenant_quota", q, QuotaReserve(key="k"),
                                      tenant_id=None)) == "internal_error"
            assert await code(rt.call("tenant_quota", q, QuotaInit(per_minute=50, per_day=90),
                                      tenant_id="t2")) == "internal_error"
            assert await code(rt.call("identity_mailbox", m, MailboxStatus(), tenant_id="t1",
                                      identity_id="i2")) == "internal_error"
            assert await code(rt.call("identity_mailbox", m, MailboxStatus(), tenant_id="t2",
                                      identity_id="i1")) == "internal_error"
            assert await code(rt.call("identity_mailbox", m, MailboxInit(), tenant_id="t1",
                                      identity_id="other")) == "internal_error"

        assert mismatches(rt, "tenant_quota") == 3
        assert mismatches(rt, "identity_mailbox") == 3
        events = [e for e in logs if e["event"] == "rpc_owner_mismatch"]
        assert len(events) == 6
        first = events[0]
        assert first["owner_tenant_id"] == "t1" and first["caller_tenant_id"] == "t2"
        assert first["log_level"] == "warning" and first.get("security") is True
        last = events[-1]
        assert last["owner_identity_id"] == "i1" and last["caller_identity_id"] == "other"

        status = await rt.call("tenant_quota", q, QuotaStatus(), tenant_id="t1")
        assert (status["per_minute"], status["per_day"]) == (5, 9)
        assert (await rt.call("tenant_quota", q, QuotaUsage(), tenant_id="t1"))["minute_used"] == 0


@pytest.mark.anyio
async def test_object_without_owner_answers_its_namespace_not_found(tmp_path: Path) -> None:
    """RPC-3: an object that was never initialised accepts only init; any other op gets its
    namespace's *_not_found code, and no file is created for it."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        cases = [
            ("tenant_quota", QuotaStatus(), "tenant_not_found"),
            ("tenant_quota", QuotaReserve(key="k"), "tenant_not_found"),
            ("identity_mailbox", MailboxStatus(), "identity_not_found"),
            ("identity_mailbox", MailboxErase(), "identity_not_found"),
            ("domain_monitor", DomainStatus(), "domain_not_found"),
        ]
        for ns, req, expected in cases:
            oid = rt.id_from_name(ns, "never-initialised")
            assert await code(rt.call(ns, oid, req, tenant_id="t1",
                                      identity_id="i1")) == expected, ns
            assert not rt.node.host.path_for(ns, oid).exists()
        d = rt.id_from_name("domain_monitor", "example")
        await rt.call("domain_monitor", d, DomainInit(domain="example.com"), tenant_id="t1")
        assert (await rt.call("domain_monitor", d, DomainStatus(), tenant_id="t1"))["domain"] == \
            "example.com"


# ---- RPC-4 ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_erased_identity_refuses_every_op(tmp_path: Path) -> None:
    """RPC-4: erase deletes the identity's content in one transaction and marks it erased; from
    then on every op, init included, answers identity_not_found, also after a restart."""
    ids = {"tenant_id": "t1", "identity_id": "i1"}
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "i1")
        await rt.call("identity_mailbox", m, MailboxInit(), **ids)
        await rt.call("identity_mailbox", m, Ingest(source_id="s1", raw=b"Subject: s\r\n\r\nhello"),
                      **ids)
        path = rt.node.host.path_for("identity_mailbox", m)

    async with TestRuntime(tmp_path) as rt:
        reply = await rt.call("identity_mailbox", m, MailboxErase(), **ids)
        assert reply == {"erased": True, "erased_at_ms": rt.now_ms()}
        for req in (MailboxStatus(), MailboxErase(), MailboxInit()):
            assert await code(rt.call("identity_mailbox", m, req, **ids)) == "identity_not_found"
        # Even a caller with another owner gets not_found, not a mismatch.
        assert await code(rt.call("identity_mailbox", m, MailboxStatus(), tenant_id="t2",
                                  identity_id="i9")) == "identity_not_found"

    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (0,)
        assert conn.execute("SELECT v FROM _ma_meta WHERE k = 'erased'").fetchone() == ("1",)
    async with TestRuntime(tmp_path) as rt:
        for req in (MailboxStatus(), MailboxInit()):
            assert await code(rt.call("identity_mailbox", m, req, **ids)) == "identity_not_found"


# ---- RPC-5 ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_deadline_already_passed_is_timeout_and_nothing_runs(tmp_path: Path) -> None:
    """RPC-5: a request whose deadline_ms has passed is answered timeout before it runs."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        ran: list[bool] = []

        async def mark(actor: Scratch, call: Call, arg: Any) -> Any:
            ran.append(True)

        now = rt.now_ms()
        assert await code(afs.run(rt, oid, mark, deadline_ms=now - 1)) == "timeout"
        assert await code(afs.scratch(rt, oid, afs.Put(k="late", v="1"),
                                      deadline_ms=now - 1)) == "timeout"
        assert ran == []
        assert await code(afs.run(rt, oid, mark, deadline_ms=now)) == "ok"  # not yet passed
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == []


@pytest.mark.anyio
async def test_deadline_is_checked_before_each_transaction(tmp_path: Path) -> None:
    """RPC-5: a handler that awaits past its deadline gets timeout at its next transaction, and
    that transaction writes nothing; the default deadline is now + 10 s (30 s for ingest, submit)."""
    assert default_deadline_ms("status") == 10_000
    assert default_deadline_ms("ingest") == default_deadline_ms("submit") == 30_000
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def wait_then_write(actor: Scratch, call: Call, arg: Any) -> Any:
            await gate.wait()
            actor.sql.transaction_sync(
                lambda tx: tx.exec("INSERT INTO items (k, v) VALUES (?, '1')", arg))
            return "written"

        results: dict[str, str] = {}

        async def go(key: str) -> None:
            results[key] = await code(afs.run(rt, oid, wait_then_write, key))

        for key, wait_ms in (("in-time", 10_000), ("too-late", 10_001)):
            gate = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(go, key)  # default deadline: now + 10 s
                await anyio.wait_all_tasks_blocked()
                await rt.advance(wait_ms)
                gate.set()
        assert results == {"in-time": "ok", "too-late": "timeout"}
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["in-time"]


@pytest.mark.anyio
async def test_deadline_is_checked_before_an_implicit_transaction(tmp_path: Path) -> None:
    """RPC-5: a write outside transaction_sync (an implicit transaction) after the deadline has
    passed is refused with timeout and writes nothing, like an explicit transaction."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")
        gate = anyio.Event()

        async def wait_then_write(actor: Scratch, call: Call, arg: Any) -> Any:
            await gate.wait()
            actor.sql.exec("INSERT INTO items (k, v) VALUES ('late', '1')")
            return "written"

        results: list[str] = []

        async def go() -> None:
            results.append(await code(afs.run(rt, oid, wait_then_write,
                                              deadline_ms=rt.now_ms() + 1_000)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await anyio.wait_all_tasks_blocked()
            await rt.advance(5_000)
            gate.set()
        assert results == ["timeout"]
        assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == []
