"""HTTP conformance (OPS-7) over real sockets: ``Allow`` on every 405, 400 for an HTTP/1.1 request
without ``Host``, every endpoint the node answers is in ``openapi.json`` (``/admin/status``
included), and ``/healthz`` shows nothing an unauthenticated caller need not see."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from live_node import OPERATOR, TOKEN, Live
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.rpc.openapi import openapi_document, openapi_json
from mailbox_actors.testing import TestRuntime


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


async def _raw(live: Live, request: bytes) -> bytes:
    """Send ``request`` as bytes on a fresh connection; everything the node answers until it
    closes (bounded)."""
    host, port = live.url.removeprefix("http://").split(":")
    with anyio.fail_after(10):
        async with await anyio.connect_tcp(host, int(port)) as stream:
            await stream.send(request)
            out = b""
            try:
                while b"\r\n\r\n" not in out or not out.endswith(b"}"):
                    out += await stream.receive()
            except anyio.EndOfStream:
                pass
    return out


@pytest.mark.anyio
async def test_every_405_names_the_allowed_methods(live: Live) -> None:
    """OPS-7 (RFC 9110 15.5.5): a wrong method is 405 with an ``Allow`` header listing the
    methods the endpoint takes."""
    qid = live.rt.id_from_name("tenant_quota", "acme")
    for method, path, allow in (("GET", f"/rpc/tenant_quota/{qid}", "POST"),
                                ("POST", "/healthz", "GET, HEAD"),
                                ("DELETE", "/metrics", "GET, HEAD"),
                                ("PUT", "/admin/status", "GET, HEAD"),
                                ("GET", "/ids/tenant_quota/unique", "POST")):
        answer = await _raw(live, f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0"
                                  "\r\nConnection: close\r\n\r\n".encode())
        head = answer.split(b"\r\n\r\n", 1)[0].decode().lower()
        assert head.startswith("http/1.1 405"), (method, path, head)
        assert f"\r\nallow: {allow.lower()}\r\n" in head + "\r\n", (method, path, head)


@pytest.mark.anyio
async def test_an_http_1_1_request_without_host_is_400(live: Live) -> None:
    """OPS-7 (RFC 9112 3.2): HTTP/1.1 without ``Host`` is 400 invalid_request; HTTP/1.0 needs
    none."""
    answer = await _raw(live, b"GET /healthz HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["err"]["code"] == "invalid_request"
    answer = await _raw(live, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer


@pytest.mark.anyio
async def test_every_endpoint_is_in_openapi_and_healthz_shows_no_detail(live: Live) -> None:
    """OPS-7: each path the node answers (not 404) matches a path of the OpenAPI document, and
    each documented path is answered; /admin/status is documented with the operator token;
    /healthz (no token) carries no path nor counts."""
    doc = openapi_document(DEFAULT_OBJECTS, "test")
    templates = [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", p) + "$") for p in doc["paths"]]
    qid = live.rt.id_from_name("tenant_quota", "acme")
    probes = [("GET", "/healthz"), ("GET", "/metrics"), ("GET", "/openapi.json"),
              ("GET", "/admin/status"), ("POST", f"/rpc/tenant_quota/{qid}"),
              ("GET", "/ids/tenant_quota/by-name/acme"), ("POST", "/ids/tenant_quota/unique"),
              ("GET", "/admin"), ("GET", "/status"), ("GET", "/ids")]
    answered = []
    for method, path in probes:
        status, _ = await live.req(method, path, b"{}" if method == "POST" else b"",
                                   token=OPERATOR if path.startswith("/admin") else None)
        if status != 404:
            answered.append(path)
            assert any(t.match(path) for t in templates), f"{path} is not in openapi.json"
    assert "/admin/status" in answered and "/admin/status" in doc["paths"]
    assert doc["paths"]["/admin/status"]["get"]["security"] == [{"operatorToken": []}]
    for path in doc["paths"]:
        concrete = re.sub(r"\{object_id\}", qid, re.sub(r"\{name\}", "acme", path))
        method = next(iter(doc["paths"][path])).upper()
        status, _ = await live.req(method, concrete, b"{}" if method == "POST" else b"")
        assert status != 404, path
    status, health = await live.req("GET", "/healthz", token=None)
    assert status == 200 and set(health) == {"status", "node", "pid"}
    assert "/" not in json.dumps(health)
