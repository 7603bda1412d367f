"""The node's HTTP endpoint over real sockets on 127.0.0.1: statuses, codes, tokens, ids, health,
metrics, the published contract, and the client against each namespace (RPC-7, RPC-8, RPC-10)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from live_node import OPERATOR, TOKEN, Live
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.objects import DEFAULT_OBJECTS, IdentityMailbox
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.rpc.openapi import openapi_json
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.domain import DomainInit, DomainStatus
from mailbox_actors.wire.mailbox import MailboxInit, MailboxStatus
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaUsage

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    async with TestRuntime(tmp_path / "node") as rt:
        app = NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR,
                      openapi=openapi_json(DEFAULT_OBJECTS, "test"))
        server = RpcHttpServer(app, max_body_bytes=1 << 20, request_timeout_s=2)
        port = await server.start("127.0.0.1", 0)
        async with HttpPool() as pool:
            yield Live(rt, f"http://127.0.0.1:{port}", pool)
        await server.stop()


def env(req: dict[str, Any], tenant: str | None = "acme", identity: str | None = None,
        **over: Any) -> bytes:
    e = {"v": 1, "tenant_id": tenant, "identity_id": identity, "request_id": "req_01TEST",
         "deadline_ms": 2**52, "req": req} | over
    return json.dumps(e).encode()


@pytest.mark.anyio
async def test_missing_and_wrong_tokens_are_401_with_unauthenticated(live: Live) -> None:
    """No token or a wrong token gets HTTP 401 with code unauthenticated (RPC-7, REL-3)."""
    qid = live.rt.id_from_name("tenant_quota", "acme")
    for token in (None, "nope-nope-nope-nope"):
        status, body = await live.req("POST", f"/rpc/tenant_quota/{qid}",
                                      env({"op": "status"}), token=token)
        assert status == 401
        assert body["err"]["code"] == "unauthenticated"
        assert body["err"]["retryable"] is False


@pytest.mark.anyio
async def test_operator_and_cluster_tokens_are_not_interchangeable(live: Live) -> None:
    """The operator token is refused on /rpc and the cluster token on operator endpoints (REL-3)."""
    qid = live.rt.id_from_name("tenant_quota", "acme")
    status, body = await live.req("POST", f"/rpc/tenant_quota/{qid}", env({"op": "status"}),
                                  token=OPERATOR)
    assert (status, body["err"]["code"]) == (403, "permission_denied")
    status, body = await live.req("GET", "/admin/status", token=TOKEN)
    assert (status, body["err"]["code"]) == (403, "permission_denied")
    status, body = await live.req("GET", "/admin/status", token=OPERATOR)
    assert status == 200 and body["status"] == "ok" and body["pid"] > 0


@pytest.mark.anyio
async def test_unknown_path_404_wrong_method_405_big_body_413(live: Live) -> None:
    """Unknown paths, wrong methods and oversize bodies get their status and own code (RPC-7)."""
    qid = live.rt.id_from_name("tenant_quota", "acme")
    status, body = await live.req("GET", "/nowhere")
    assert (status, body["err"]["code"]) == (404, "invalid_request")  # RPC-7's 404, SPEC 5's code
    assert body["err"]["details"]["field"] == "path"
    status, body = await live.req("GET", f"/rpc/tenant_quota/{qid}")
    assert (status, body["err"]["code"]) == (405, "method_not_allowed")
    status, body = await live.req("POST", "/healthz")
    assert status == 405
    status, body = await live.req("POST", f"/rpc/tenant_quota/{qid}", b"x" * (1 << 20 + 1))
    assert (status, body["err"]["code"]) == (413, "payload_too_large")


@pytest.mark.anyio
async def test_envelope_that_does_not_decode_is_200_with_field_path(live: Live) -> None:
    """A bad envelope is a handled request: 200, invalid_request, the bad field's path (RPC-7)."""
    qid = live.rt.id_from_name("tenant_quota", "acme")
    path = f"/rpc/tenant_quota/{qid}"
    status, body = await live.req("POST", path, env({"op": "reserve", "key": "k", "count": "x"}))
    assert status == 200
    assert body["err"]["code"] == "invalid_request"
    assert body["err"]["details"]["path"] == "$.req.count"
    status, body = await live.req("POST", path, b"{not json")
    assert (status, body["err"]["code"]) == (200, "invalid_request")
    status, body = await live.req("POST", path, env({"op": "status"}, v=2))
    assert (status, body["err"]["code"]) == (200, "unsupported_version")
    status, body = await live.req("POST", path, env({"op": "fly"}))
    assert (status, body["err"]["code"]) == (200, "invalid_request")
    assert "reserve" in body["err"]["details"]["ops"]


@pytest.mark.anyio
@pytest.mark.parametrize("bad_id", ["..%2F..%2Fetc", "%00", "0" * 64, "A" * 64, "x"])
async def test_bad_ids_are_invalid_request_and_write_nothing(live: Live, bad_id: str) -> None:
    """Ids with ``../``, NUL, a foreign key or the wrong shape are refused; no file is written
    (RT-1, REL-2)."""
    before = sorted(p for p in live.rt.data_dir.rglob("*"))
    status, body = await live.req("POST", f"/rpc/tenant_quota/{bad_id}",
                                  env({"op": "init", "per_minute": 1, "per_day": 1}))
    assert status in (200, 404)
    assert body["err"]["code"] == "invalid_request"
    assert sorted(p for p in live.rt.data_dir.rglob("*")) == before


@pytest.mark.anyio
async def test_ids_by_name_and_unique(live: Live) -> None:
    """``GET /ids/{ns}/by-name/{name}`` is deterministic and ``POST /ids/{ns}/unique`` mints a
    fresh valid id; both need the token (RT-1, RPC-7)."""
    s1, a = await live.req("GET", "/ids/tenant_quota/by-name/acme")
    s2, b = await live.req("GET", "/ids/tenant_quota/by-name/acme")
    assert s1 == s2 == 200 and a["id"] == b["id"] == live.rt.id_from_name("tenant_quota", "acme")
    s3, u = await live.req("POST", "/ids/identity_mailbox/unique")
    assert s3 == 200 and len(u["id"]) == 64
    live.rt.node.router.id_from_string("identity_mailbox", u["id"])
    s4, _ = await live.req("GET", "/ids/tenant_quota/by-name/acme", token=None)
    assert s4 == 401
    s5, e = await live.req("GET", "/ids/nope/by-name/acme")
    assert (s5, e["err"]["code"]) == (400, "invalid_request")


@pytest.mark.anyio
async def test_healthz_and_metrics_need_no_token_and_show_no_content(live: Live) -> None:
    """``/healthz`` reports status, node and pid only (no path, no counts: OPS-7); ``/metrics`` is
    Prometheus text with the required series and never content or addresses (RPC-7, CL-5)."""
    status, health = await live.req("GET", "/healthz", token=None)
    assert status == 200
    assert set(health) == {"status", "node", "pid"}
    assert str(live.rt.node.settings.path) not in json.dumps(health)
    qid = live.rt.id_from_name("tenant_quota", "acme")
    await live.req("POST", f"/rpc/tenant_quota/{qid}",
                   env({"op": "init", "per_minute": 5, "per_day": 50}))
    await live.req("POST", f"/rpc/tenant_quota/{qid}", env({"op": "usage"}, tenant="intruder"))
    status, text = await live.req("GET", "/metrics", token=None)
    assert status == 200
    for series in ("rpc_requests_total", "rpc_owner_mismatch_total", "alarms_fired_total",
                   "alarm_retries_total", "actors_active", "rpc_request_duration_seconds_bucket"):
        assert series in text
    assert 'rpc_owner_mismatch_total{namespace="tenant_quota"} 1' in text
    assert 'rpc_requests_total{code="internal_error",namespace="tenant_quota",op="usage"} 1' in text
    assert "@" not in text and "intruder" not in text


@pytest.mark.anyio
async def test_served_openapi_matches_the_checked_in_document(live: Live) -> None:
    """``GET /openapi.json`` is the generated contract and equals ``openapi.json`` in the
    repository (RPC-10)."""
    status, served = await live.req("GET", "/openapi.json", token=None)
    assert status == 200
    assert served["openapi"] == "3.1.0"
    checked_in = json.loads((ROOT / "openapi.json").read_text())
    served["info"]["version"] = checked_in["info"]["version"]
    assert served == checked_in, "run: mailbox-actors openapi -o openapi.json"
    assert openapi_json(DEFAULT_OBJECTS, checked_in["info"]["version"]) == (
        ROOT / "openapi.json").read_bytes()


@pytest.mark.anyio
async def test_client_calls_each_namespace(live: Live) -> None:
    """The client reaches all three namespaces and maps ``err`` bodies to RpcError (RPC-8)."""
    async with Client(live.url, TOKEN) as c:
        qid = await c.id_from_name("tenant_quota", "acme")
        await c.call("tenant_quota", qid, QuotaInit(per_minute=1, per_day=10), tenant_id="acme")
        r = await c.call("tenant_quota", qid, QuotaReserve(key="a"), tenant_id="acme")
        assert r["granted"] is True
        with pytest.raises(RpcError) as ei:
            await c.call("tenant_quota", qid, QuotaReserve(key="b"), tenant_id="acme",
                         idempotent=False)
        assert ei.value.code.value == "rate_limited"
        assert ei.value.details is not None and ei.value.details["retry_after_ms"] > 0
        usage = await c.call("tenant_quota", qid, QuotaUsage(), tenant_id="acme")
        assert usage["minute_used"] == 1

        mid = await c.new_unique_id("identity_mailbox")
        await c.call("identity_mailbox", mid, MailboxInit(), tenant_id="acme", identity_id="i1")
        st = await c.call("identity_mailbox", mid, MailboxStatus(), tenant_id="acme",
                          identity_id="i1")
        assert (st["tenant_id"], st["identity_id"]) == ("acme", "i1")
        assert st["schema_version"] == len(IdentityMailbox.migrations)

        did = await c.id_from_name("domain_monitor", "example.com")
        await c.call("domain_monitor", did, DomainInit(domain="example.com"), tenant_id="acme")
        ds = await c.call("domain_monitor", did, {"op": "status"}, tenant_id="acme")
        assert (ds["domain"], ds["state"]) == ("example.com", "pending")
        with pytest.raises(RpcError) as ei:
            await c.call("domain_monitor", await c.id_from_name("domain_monitor", "x.org"),
                         DomainStatus(), tenant_id="acme")
        assert ei.value.code.value == "domain_not_found"


@pytest.mark.anyio
async def test_client_maps_unreachable_node_to_unavailable(live: Live) -> None:
    """A connection failure is ``unavailable`` (retryable), retried only within the deadline
    (RPC-8)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
        async with Client(dead, TOKEN, max_attempts=2) as c:
            with pytest.raises(RpcError) as ei:
                await c.call("tenant_quota", "0" * 64, {"op": "status"}, tenant_id="acme")
    assert ei.value.code.value == "unavailable"
    assert ei.value.retryable


@pytest.mark.anyio
async def test_an_app_with_an_empty_cluster_token_refuses_an_empty_bearer(tmp_path: Path) -> None:
    """RPC-7, REL-3: an embedding that gives NodeApp an empty cluster token lets nobody in:
    ``Authorization: Bearer`` with nothing after it is 401 unauthenticated, not a call."""
    async with TestRuntime(tmp_path) as rt:
        app = NodeApp(rt.node, cluster_token="", operator_token=OPERATOR)
        qid = rt.id_from_name("tenant_quota", "acme")
        for header in ("Bearer ", "Bearer", ""):
            status, body, _ = await app("POST", f"/rpc/tenant_quota/{qid}",
                                        {"authorization": header, "host": "x"},
                                        env({"op": "status"}))
            assert status == 401, header
            assert json.loads(body)["err"]["code"] == "unauthenticated"
@pytest.mark.anyio
async def test_client_surfaces_http_errors_with_their_code(live: Live) -> None:
    """A wrong token reaches the caller as ``unauthenticated``, not as a generic failure (RPC-8)."""
    async with Client(live.url, "wrong-token-wrong-token") as c:
        with pytest.raises(RpcError) as ei:
            await c.call("tenant_quota", live.rt.id_from_name("tenant_quota", "a"),
                         {"op": "status"}, tenant_id="a")
    assert ei.value.code.value == "unauthenticated"
    assert msgspec.to_builtins(ei.value.to_body())["retryable"] is False
