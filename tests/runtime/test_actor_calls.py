"""Actor-to-actor calls (RPC-9) go through the same envelope and router as any caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaStatus


def rpc_count(rt: TestRuntime, ns: str, op: str, code: str) -> float:
    return rt.node.metrics.get("rpc_requests_total", (("namespace", ns), ("op", op), ("code", code)))


@pytest.mark.anyio
async def test_actor_asks_tenant_quota_through_the_router(tmp_path: Path) -> None:
    """RPC-9: an actor calling TenantQuota gets its ok value as plain JSON, or its error as a
    MailboxActorsError with the code (rate_limited with retry_after_ms); each call is counted by
    the router like any other RPC."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        q = rt.id_from_name("tenant_quota", afs.TENANT)
        await rt.call("tenant_quota", q, QuotaInit(per_minute=2, per_day=100), tenant_id=afs.TENANT)
        caller = await afs.new_scratch(rt, "caller")

        async def reserve(actor: Scratch, call: Call, arg: Any) -> Any:
            try:
                return await actor.ctx.call("tenant_quota", q, QuotaReserve(key=arg),
                                            tenant_id=call.tenant_id)
            except MailboxActorsError as e:
                return {"code": e.code.value, "details": e.details}

        first = await afs.run(rt, caller, reserve, "k1")
        assert first["granted"] is True and first["reservation_id"].startswith("rsv_")
        assert await afs.run(rt, caller, reserve, "k1") == first  # idempotent on the key
        assert (await afs.run(rt, caller, reserve, "k2"))["granted"] is True
        refused = await afs.run(rt, caller, reserve, "k3")
        assert refused["code"] == "rate_limited"
        assert refused["details"]["retry_after_ms"] > 0
        assert rpc_count(rt, "tenant_quota", "reserve", "ok") == 3
        assert rpc_count(rt, "tenant_quota", "reserve", "rate_limited") == 1

        # The owner check applies to actor callers too.
        async def wrong_tenant(actor: Scratch, call: Call, arg: Any) -> Any:
            return await actor.ctx.call("tenant_quota", q, QuotaStatus(), tenant_id="intruder")

        with pytest.raises(MailboxActorsError) as e:
            await afs.run(rt, caller, wrong_tenant)
        assert e.value.code == "internal_error"
        assert rt.node.metrics.get("rpc_owner_mismatch_total", (("namespace", "tenant_quota"),)) == 1


@pytest.mark.anyio
async def test_actor_call_carries_request_id_and_deadline(tmp_path: Path) -> None:
    """RPC-9, RT-12: the callee sees the caller's request_id and deadline_ms in its envelope, with
    the tenant the caller chose."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = await afs.new_scratch(rt, "a")
        b = await afs.new_scratch(rt, "b")

        async def echo(actor: Scratch, call: Call, arg: Any) -> Any:
            return {"request_id": call.request_id, "deadline_ms": call.deadline_ms,
                    "tenant_id": call.tenant_id, "v": call.v, "me": actor.ctx.id}

        echo_name = afs.hook(echo)

        async def forward(actor: Scratch, call: Call, arg: Any) -> Any:
            inner = await actor.ctx.call("scratch", b, afs.Run(hook=echo_name),
                                         tenant_id=afs.TENANT)
            return {"outer": {"request_id": call.request_id, "deadline_ms": call.deadline_ms},
                    "inner": inner}

        deadline = rt.now_ms() + 4_321
        out = await afs.run(rt, a, forward, deadline_ms=deadline)
        assert out["inner"]["me"] == b and out["inner"]["v"] == 1
        assert out["inner"]["request_id"] == out["outer"]["request_id"]
        assert out["inner"]["deadline_ms"] == out["outer"]["deadline_ms"] == deadline
        assert out["inner"]["tenant_id"] == afs.TENANT
        assert rpc_count(rt, "scratch", "run", "ok") == 2


@pytest.mark.anyio
async def test_actor_call_refusals_match_external_callers(tmp_path: Path) -> None:
    """RPC-9, RPC-6: from inside an actor, an unknown namespace or a malformed id is refused with
    invalid_request, and an uninitialised target with its not_found code."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = await afs.new_scratch(rt, "a")
        target = rt.id_from_name("tenant_quota", "nobody")

        async def probe(actor: Scratch, call: Call, arg: Any) -> Any:
            codes = []
            for ns, oid in (("nope", target), ("tenant_quota", "../" + target[3:]),
                            ("tenant_quota", target)):
                try:
                    await actor.ctx.call(ns, oid, QuotaStatus(), tenant_id="t1")
                    codes.append("ok")
                except MailboxActorsError as e:
                    codes.append(e.code.value)
            return codes

        assert await afs.run(rt, a, probe) == ["invalid_request", "invalid_request",
                                               "tenant_not_found"]
