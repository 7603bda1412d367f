"""Operator inspection over HTTP (UI-1): the operator token only, every parameter checked, and a
cluster's listing merged across its nodes page by page."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

import actors_for_tests as afs
from live_node import OPERATOR, TOKEN, Live
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.forwarding import Peers
from mailbox_actors.testing import TestRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    async with TestRuntime(tmp_path / "node", objects=afs.ALL_OBJECTS) as rt:
        app = NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR)
        server = RpcHttpServer(app, max_body_bytes=1 << 20, request_timeout_s=2)
        port = await server.start("127.0.0.1", 0)
        async with HttpPool() as pool:
            yield Live(rt, f"http://127.0.0.1:{port}", pool)
        await server.stop()


async def test_inspection_needs_the_operator_token(live: Live) -> None:
    """UI-1, REL-3: no token is unauthenticated, the cluster token permission_denied, on every
    inspection endpoint."""
    oid = await afs.new_scratch(live.rt, "a")
    for path in ("/admin/inspect", "/admin/actors/scratch", f"/admin/actors/scratch/{oid}",
                 f"/admin/actors/scratch/{oid}/rows/items", f"/admin/actors/scratch/{oid}/kv",
                 f"/admin/actors/scratch/{oid}/outbox"):
        status, body = await live.req("GET", path, token=None)
        assert (status, body["err"]["code"]) == (401, "unauthenticated"), path
        status, body = await live.req("GET", path, token=TOKEN)
        assert (status, body["err"]["code"]) == (403, "permission_denied"), path
        status, body = await live.req("GET", path, token=OPERATOR)
        assert status == 200, (path, body)
        status, _ = await live.req("POST", path, token=OPERATOR)
        assert status == 405


async def test_inspection_over_http_answers_what_the_inspector_does(live: Live) -> None:
    """UI-1: the overview, a page, one actor, its rows, KV and outbox as JSON; a cursor followed
    to the end."""
    ids = sorted([await afs.new_scratch(live.rt, f"n{i}") for i in range(7)])
    await afs.scratch(live.rt, ids[0], afs.Put(k="a", v="queued"))
    status, view = await live.req("GET", "/admin/inspect", token=OPERATOR)
    assert status == 200
    assert {c["namespace"]: c["actors"] for c in view["namespaces"]}["scratch"] == 7
    seen: list[str] = []
    path = "/admin/actors/scratch?limit=3"
    while True:
        status, page = await live.req("GET", path, token=OPERATOR)
        assert status == 200 and len(page["actors"]) <= 3
        seen += [a["id"] for a in page["actors"]]
        if page["next_cursor"] is None:
            break
        path = f"/admin/actors/scratch?limit=3&cursor={page['next_cursor']}"
    assert seen == ids
    status, one = await live.req("GET", f"/admin/actors/scratch/{ids[0]}", token=OPERATOR)
    assert status == 200 and one["meta"]["owner_tenant"] == afs.TENANT and one["active"]
    status, rows = await live.req("GET", f"/admin/actors/scratch/{ids[0]}/rows/items",
                                  token=OPERATOR)
    assert status == 200 and rows["rows"] == [["a", "queued"]]


async def test_every_inspection_parameter_is_checked(live: Live) -> None:
    """UI-1: a bad namespace, id, table, limit, cursor (from another listing too) or an unknown
    or repeated parameter is 400 invalid_request; content outside dev mode is 403; an absent
    actor is 404."""
    ids = [await afs.new_scratch(live.rt, f"n{i}") for i in range(3)]
    status, page = await live.req("GET", "/admin/actors/scratch?limit=1", token=OPERATOR)
    other = page["next_cursor"]
    base = f"/admin/actors/scratch/{ids[0]}"
    for path in ("/admin/actors/nope", "/admin/actors/scratch?limit=0",
                 "/admin/actors/scratch?limit=x", "/admin/actors/scratch?limit=1000",
                 "/admin/actors/scratch?cursor=abc", f"/admin/actors/purposes?cursor={other}",
                 f"{base}/rows/items?cursor={other}", "/admin/actors/scratch?sort=id",
                 "/admin/actors/scratch?limit=1&limit=2", "/admin/actors/scratch/xyz",
                 f"{base}/rows/nope", f"{base}/rows/a%22b", "/admin/inspect?x=1",
                 f"{base}/kv?content=maybe"):
        status, body = await live.req("GET", path, token=OPERATOR)
        assert (status, body["err"]["code"]) == (400, "invalid_request"), (path, body)
    status, body = await live.req("GET", f"{base}/rows/items?content=1", token=OPERATOR)
    assert (status, body["err"]["code"]) == (403, "permission_denied")
    missing = live.rt.id_from_name("scratch", "never")
    status, body = await live.req("GET", f"/admin/actors/scratch/{missing}", token=OPERATOR)
    assert (status, body["err"]["code"]) == (404, "tenant_not_found")  # the runtime's default
    status, body = await live.req("GET", f"{base}/nothing", token=OPERATOR)
    assert (status, body["err"]["code"]) == (404, "invalid_request")  # no such endpoint (RPC-7)
    assert body["err"]["details"]["field"] == "path"


async def test_a_cluster_listing_merges_every_nodes_actors_in_id_order(tmp_path: Path) -> None:
    """UI-1: across two nodes, the listing pages through every actor once in id order (each node
    holding its own), the overview sums them, and one actor is answered by its owner."""
    apps: list[NodeApp] = []

    async def forward(owner: int, method: str, path: str, headers: Any, body: bytes,
                      timeout_s: float) -> tuple[int, bytes]:
        answer = await apps[owner](method, path, headers, body)
        return answer[0], answer[1]

    names = ["node-0", "node-1"]
    async with AsyncExitStack() as stack:
        rts = [await stack.enter_async_context(TestRuntime(
            tmp_path / n, objects=afs.ALL_OBJECTS, node_name=n,
            peers=Peers(names, i, forward, cluster_token=TOKEN))) for i, n in enumerate(names)]
        apps += [NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR) for rt in rts]
        ids = sorted([await afs.new_scratch(rts[0], f"n{i}") for i in range(20)])
        held = [len(rt.list_ids("scratch")) for rt in rts]
        assert sum(held) == 20 and min(held) > 0  # both nodes hold some
        auth = {"authorization": f"Bearer {OPERATOR}"}
        seen: list[str] = []
        nodes: set[str] = set()
        path = "/admin/actors/scratch?limit=6"

        while True:
            status, body, _ = (await apps[1]("GET", path, auth, b""))[:3]
            assert status == 200, body
            page = json.loads(body)
            seen += [a["id"] for a in page["actors"]]
            nodes |= {a["node"] for a in page["actors"]}
            if page["next_cursor"] is None:
                break
            path = f"/admin/actors/scratch?limit=6&cursor={page['next_cursor']}"
        assert seen == ids and nodes == set(names)
        status, body, _ = (await apps[0]("GET", "/admin/inspect", auth, b""))[:3]
        view = json.loads(body)
        assert {c["namespace"]: c["actors"] for c in view["namespaces"]}["scratch"] == 20
        assert sorted(view["nodes"]) == names
        for oid in ids[:4]:
            status, body, _ = (await apps[0]("GET", f"/admin/actors/scratch/{oid}", auth,
                                             b""))[:3]
            one = json.loads(body)
            assert status == 200 and one["id"] == oid
            assert oid in rts[names.index(one["node"])].list_ids("scratch")


async def test_an_operator_reads_a_source_or_attachment_only_in_dev_mode(tmp_path: Path) -> None:
    """UI-2: in dev mode the operator reads a message's raw source and an attachment from the
    mailbox's file (no activation); otherwise permission_denied; a bad part or chunk is
    invalid_request, an unknown message email_not_found."""
    import base64

    from mailbox_actors.wire.inbound import Ingest
    from mailbox_actors.wire.mailbox import MailboxInit

    raw = (b"From: <a@example.com>\r\nSubject: s\r\nMessage-ID: <m@x>\r\nMIME-Version: 1.0\r\n"
           b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain"
           b"\r\n\r\nhi\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition:"
           b" attachment; filename=n.bin\r\nContent-Transfer-Encoding: base64\r\n\r\nAAEC\r\n"
           b"--b--\r\n")
    async with TestRuntime(tmp_path / "node") as rt:
        m = rt.id_from_name("identity_mailbox", "bob")
        ids = {"tenant_id": "ten_1", "identity_id": "idn_1"}
        await rt.call("identity_mailbox", m, MailboxInit(), **ids)
        got = await rt.call("identity_mailbox", m, Ingest(source_id="s", raw=raw), **ids)
        rt.node.host.evict_all_idle()
        before = rt.node.host.activations
        auth = {"authorization": f"Bearer {OPERATOR}"}
        base = f"/admin/actors/identity_mailbox/{m}/messages/{got['message_id']}"
        dev = NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR,
                      content_allowed=True)
        plain = NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR)

        async def get(app: NodeApp, path: str) -> tuple[int, Any]:
            answer = await app("GET", path, auth, b"")
            return answer[0], json.loads(answer[1])
        status, src = await get(dev, f"{base}/raw")
        assert status == 200 and base64.b64decode(src["data"]) == raw and src["kept"]
        status, part = await get(dev, f"{base}/attachments/0?chunk=0")
        assert status == 200 and base64.b64decode(part["data"]) == b"\x00\x01\x02"
        assert part["filename"] == "n.bin"
        status, body = await get(plain, f"{base}/raw")
        assert (status, body["err"]["code"]) == (403, "permission_denied")
        for path in (f"{base}/attachments/-1", f"{base}/attachments/1", f"{base}/raw?chunk=5",
                     f"{base}/raw?chunk=x", f"{base}/attachments/x", f"{base}/other"):
            status, body = await get(dev, path)
            assert (status, body["err"]["code"]) == (400, "invalid_request"), (path, body)
        status, body = await get(dev, f"/admin/actors/identity_mailbox/{m}/messages/imsg_no/raw")
        assert (status, body["err"]["code"]) == (404, "email_not_found")
        assert rt.node.host.activations == before
