"""The envelope and results on the byte-level RPC path (RPC-1, RPC-2, RPC-6): what a host service
sends and gets back, including every kind of bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

import actors_for_tests as afs
from actors_for_tests import Scratch
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime

ERR_KEYS = {"code", "message", "fix", "retryable"}


def envelope(rt: TestRuntime, req_body: Any, **over: Any) -> dict[str, Any]:
    env = {"v": 1, "tenant_id": "t1", "identity_id": None, "request_id": "req_01TESTTESTTEST",
           "actor_key_id": None, "deadline_ms": rt.now_ms() + 10_000, "req": req_body}
    env.update(over)
    return env


async def send(rt: TestRuntime, ns: str, oid: str, body: Any) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
    reply = msgspec.json.decode(await rt.call_bytes(ns, oid, raw))
    assert isinstance(reply, dict) and len(reply) == 1 and set(reply) <= {"ok", "err"}
    if "err" in reply:
        err = reply["err"]
        assert ERR_KEYS <= set(err) <= ERR_KEYS | {"request_id", "details"}
        assert "Traceback" not in err["message"] and 'File "' not in err["message"]
    return reply


@pytest.mark.anyio
async def test_version_1_envelope_round_trip(tmp_path: Path) -> None:
    """RPC-1, RPC-2: a version-1 envelope with exactly the seed's fields is answered {"ok": ...};
    an error is {"err": {code, message, fix, retryable, request_id}} echoing the request id."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name("tenant_quota", "t1")
        ok = await send(rt, "tenant_quota", oid,
                        envelope(rt, {"op": "init", "per_minute": 5, "per_day": 10}))
        assert ok == {"ok": {"created": True}}
        ok = await send(rt, "tenant_quota", oid, envelope(rt, {"op": "status"}))
        assert ok["ok"]["per_minute"] == 5 and ok["ok"]["tenant_id"] == "t1"
        # Optional fields may be left out.
        minimal = {"v": 1, "tenant_id": "t1", "request_id": "req_01MINIMAL",
                   "deadline_ms": rt.now_ms() + 1_000, "req": {"op": "usage"}}
        assert (await send(rt, "tenant_quota", oid, minimal))["ok"]["minute_limit"] == 5

        err = (await send(rt, "tenant_quota", oid, envelope(
            rt, {"op": "status"}, tenant_id="t2", request_id="req_01ECHOED")))["err"]
        assert err["request_id"] == "req_01ECHOED"
        assert err["code"] == "internal_error" and err["retryable"] is True and err["fix"]


@pytest.mark.anyio
async def test_wrong_envelope_version_is_unsupported_version(tmp_path: Path) -> None:
    """RPC-1: an envelope whose v is not 1 is answered unsupported_version."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name("tenant_quota", "t1")
        for v in (0, 2, 99, -1):
            err = (await send(rt, "tenant_quota", oid, envelope(rt, {"op": "status"}, v=v)))["err"]
            assert err["code"] == "unsupported_version", v
            assert err["retryable"] is False
        # Even with a body this version does not understand.
        err = (await send(rt, "tenant_quota", oid, envelope(rt, {"op": "teleport"}, v=2)))["err"]
        assert err["code"] == "unsupported_version"


@pytest.mark.anyio
@pytest.mark.parametrize(("change", "path"), [
    ({"deadline_ms": "soon"}, "$.deadline_ms"),
    ({"deadline_ms": -5}, "$.deadline_ms"),
    ({"tenant_id": 7}, "$.tenant_id"),
    ({"tenant_id": "has space"}, "$.tenant_id"),
    ({"request_id": "not-a-req-id"}, "$.request_id"),
    ({"req": {"op": "init", "per_minute": "five", "per_day": 10}}, "$.req.per_minute"),
    ({"req": {"op": "init", "per_minute": 0, "per_day": 10}}, "$.req.per_minute"),
    ({"req": {"op": "init", "per_minute": 5}}, "$.req"),
    ({"req": {"op": "reserve", "key": "k", "count": 1.5}}, "$.req.count"),
    ({"req": {"op": "reserve", "key": ""}}, "$.req.key"),
    ({"req": {"op": "reserve", "key": "k", "surprise": 1}}, "$.req"),
    ({"req": "status"}, "$.req"),
])
async def test_bad_types_are_invalid_request_with_the_field_path(
        tmp_path: Path, change: dict[str, Any], path: str) -> None:
    """RPC-1, RPC-6: an envelope or body field of the wrong type or out of range is answered
    invalid_request with the path of the bad field in details, and runs nothing."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name("tenant_quota", "t1")
        err = (await send(rt, "tenant_quota", oid, envelope(rt, {"op": "status"}, **change)))["err"]
        assert err["code"] == "invalid_request"
        assert err["details"]["path"] == path
        assert rt.node.host.active_count == 0


@pytest.mark.anyio
async def test_unknown_op_and_malformed_json_are_invalid_request(tmp_path: Path) -> None:
    """RPC-1, RPC-6: an op the namespace does not have, a missing op, a missing field of the
    envelope and bytes that are not JSON are each answered invalid_request."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name("tenant_quota", "t1")
        bad: list[Any] = [
            envelope(rt, {"op": "explode"}),
            envelope(rt, {"op": "submit"}),  # another namespace's op
            envelope(rt, {}),
            {k: v for k, v in envelope(rt, {"op": "status"}).items() if k != "request_id"},
            {k: v for k, v in envelope(rt, {"op": "status"}).items() if k != "deadline_ms"},
            b"",
            b"{not json",
            b"[1, 2, 3]",
            b"\xff\xfe",
        ]
        for body in bad:
            err = (await send(rt, "tenant_quota", oid, body))["err"]
            assert err["code"] == "invalid_request", body if isinstance(body, dict) else body[:40]
        unknown = (await send(rt, "tenant_quota", oid, envelope(rt, {"op": "explode"})))["err"]
        assert "init" in unknown["details"]["ops"] and "reserve" in unknown["details"]["ops"]


@pytest.mark.anyio
async def test_deeply_nested_json_is_invalid_request(tmp_path: Path) -> None:
    """RPC-6: a body nested thousands of levels deep is answered invalid_request (not
    internal_error, which a client would retry), and the node keeps serving."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name("tenant_quota", "t1")
        deep = b"[" * 10_000 + b"]" * 10_000
        for body in (b'{"v": 1, "req": ' + deep + b"}",
                     msgspec.json.encode(envelope(rt, {"op": "status"})).replace(
                         b'"actor_key_id":null', b'"actor_key_id":' + deep)):
            err = (await send(rt, "tenant_quota", oid, body))["err"]
            assert err["code"] == "invalid_request"
        ok = await send(rt, "tenant_quota", oid, envelope(rt, {"op": "init", "per_minute": 1,
                                                               "per_day": 1}))
        assert ok == {"ok": {"created": True}}


@pytest.mark.anyio
async def test_every_error_body_carries_a_request_id(tmp_path: Path) -> None:
    """RPC-2, RT-12: every error body has its request_id, the caller's when the envelope decoded
    and a freshly minted req_ id when it did not (an RPC always has one, for the logs)."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name("tenant_quota", "t1")
        decoded = (await send(rt, "tenant_quota", oid, envelope(rt, {"op": "status"})))["err"]
        assert decoded["request_id"] == "req_01TESTTESTTEST"
        for body in (b"{not json", envelope(rt, {"op": "explode"}),
                     envelope(rt, {"op": "status"}, v=2)):
            err = (await send(rt, "tenant_quota", oid, body))["err"]
            assert isinstance(err.get("request_id"), str), err
            assert err["request_id"].startswith("req_")
        err = (await send(rt, "nope", oid, envelope(rt, {"op": "status"})))["err"]
        assert isinstance(err.get("request_id"), str) and err["request_id"].startswith("req_")


@pytest.mark.anyio
async def test_unexpected_handler_failure_is_internal_error_without_details(
        tmp_path: Path) -> None:
    """RPC-6: a handler bug is answered internal_error with a generic message: no stack trace, no
    exception text, and the node keeps serving."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def bug(actor: Scratch, call: Call, arg: Any) -> Any:
            raise ZeroDivisionError("secret-internal-detail")

        name = afs.hook(bug)
        body = envelope(rt, {"op": "run", "hook": name}, tenant_id=afs.TENANT)
        err = (await send(rt, "scratch", oid, body))["err"]
        assert err["code"] == "internal_error"
        assert "secret-internal-detail" not in msgspec.json.encode(err).decode()
        assert "ZeroDivisionError" not in err["message"]
        ok = await send(rt, "scratch", oid, envelope(rt, {"op": "get", "k": "x"},
                                                      tenant_id=afs.TENANT))
        assert ok == {"ok": None}


@pytest.mark.anyio
async def test_rpc_requests_are_counted_by_namespace_op_and_code(tmp_path: Path) -> None:
    """RPC-6: every handled request, ok or not, is counted in rpc_requests_total by namespace, op
    and code."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name("tenant_quota", "t1")
        await send(rt, "tenant_quota", oid, envelope(rt, {"op": "init", "per_minute": 1,
                                                          "per_day": 1}))
        await send(rt, "tenant_quota", oid, envelope(rt, {"op": "status"}, tenant_id="t9"))
        m = rt.node.metrics
        assert m.get("rpc_requests_total", (("namespace", "tenant_quota"), ("op", "init"),
                                            ("code", "ok"))) == 1
        assert m.get("rpc_requests_total", (("namespace", "tenant_quota"), ("op", "status"),
                                            ("code", "internal_error"))) == 1


@pytest.mark.anyio
async def test_an_id_used_in_one_namespace_is_still_refused_by_another(tmp_path: Path) -> None:
    """RT-1: once an id has been served in its namespace (its check is remembered, so a hot actor
    skips the digest), another namespace still refuses it, and a tampered copy is still refused."""
    async with TestRuntime(tmp_path) as rt:
        oid = rt.id_from_name("tenant_quota", "t1")
        ok = await send(rt, "tenant_quota", oid,
                        envelope(rt, {"op": "init", "per_minute": 5, "per_day": 10}))
        assert ok == {"ok": {"created": True}}
        assert (await send(rt, "tenant_quota", oid, envelope(rt, {"op": "usage"})))["ok"]
        err = (await send(rt, "domain_monitor", oid, envelope(rt, {"op": "status"})))["err"]
        assert err["code"] == "invalid_request" and "namespace" in err["message"]
        tampered = oid[:-1] + ("0" if oid[-1] != "0" else "1")
        err = (await send(rt, "tenant_quota", tampered, envelope(rt, {"op": "usage"})))["err"]
        assert err["code"] == "invalid_request"
