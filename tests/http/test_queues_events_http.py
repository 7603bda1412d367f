"""Queues and events for an operator over HTTP (UI-3): a webhook given up on is listed with its
reason and attempts and redriven to a receiver that works now; a tenant's events are followed by
cursor; every parameter is checked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from live_node import OPERATOR, TOKEN, Live
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.testing import TestRuntime, WebhookReceiver
from mailbox_actors.testing.ports import free_port

pytestmark = pytest.mark.anyio
SECRET = "whsec-0123456789abcdef0123456789"


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    async with TestRuntime(tmp_path / "node", control=True) as rt:
        app = NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR)
        server = RpcHttpServer(app, max_body_bytes=1 << 20, request_timeout_s=2)
        port = await server.start("127.0.0.1", 0)
        async with HttpPool() as pool:
            yield Live(rt, f"http://127.0.0.1:{port}", pool)
        await server.stop()


async def _dead_letter_a_webhook(live: Live) -> str:
    """A tenant whose endpoint refuses connections; its identity's event is given up on after the
    schedule's retries. Returns the tenant's id."""
    db = live.rt.node.control_db
    assert db is not None
    tenant = await db.create_tenant("acme", webhook_url=f"http://127.0.0.1:{free_port()}/hooks",
                                    webhook_secret=SECRET)
    await create_identity(db, live.rt.node, tenant.id, "bob")
    for _ in range(40):  # the schedule is 1 s .. 1 h, seven retries: about 1.7 h in all
        await live.rt.advance(600_000)
        _, page = await live.req("GET", "/admin/queues/webhooks/dead-letters",
                                      token=OPERATOR)
        if page["dead_letters"]:
            break
    return tenant.id


async def test_a_dead_webhook_is_listed_and_redriven_to_a_working_receiver(live: Live) -> None:
    """UI-3: the dead letter shows its queue, reason and attempts (no content); a redrive sends
    it back to the webhooks queue with its attempts started again, the record goes, and the
    tenant's receiver (working now) gets the event."""
    tenant = await _dead_letter_a_webhook(live)
    status, page = await live.req("GET", "/admin/queues/webhooks/dead-letters", token=OPERATOR)
    assert status == 200 and len(page["dead_letters"]) == 2  # the quota's and the identity's
    for letter in page["dead_letters"]:
        assert letter["queue"] == "webhooks" and letter["attempts"] == 8
        assert letter["reason"] == "connect failed after 8 attempts"
        assert letter["body"]["tenant_id"] == tenant
    first, second = page["dead_letters"]
    status, one = await live.req("GET", "/admin/queues/webhooks/dead-letters?limit=1",
                                 token=OPERATOR)
    status, two = await live.req(
        "GET", f"/admin/queues/webhooks/dead-letters?limit=1&cursor={one['next_cursor']}",
        token=OPERATOR)
    assert [d["message_id"] for d in one["dead_letters"] + two["dead_letters"]] == [
        first["message_id"], second["message_id"]] and two["next_cursor"] is None
    async with WebhookReceiver(SECRET, now_ms=live.rt.clock.now_ms) as hooks:
        db = live.rt.node.control_db
        assert db is not None
        await db.set_webhook(tenant, hooks.url, SECRET)
        status, reply = await live.req(
            "POST", "/admin/queues/webhooks/redrive",
            f'{{"message_ids": ["{first["message_id"]}"]}}'.encode(), token=OPERATOR)
        assert status == 200, reply
        assert [r["message_id"] for r in reply["redriven"]] == [first["message_id"]]
        await live.rt.advance(1_000)
        with anyio.fail_after(30):
            [delivery] = await hooks.wait_for(1)
        assert delivery.verified and delivery.attempt == 1 and delivery.status == 200  # again first
        status, reply = await live.req("POST", "/admin/queues/webhooks/redrive", b"{}",
                                       token=OPERATOR)
        assert [r["message_id"] for r in reply["redriven"]] == [second["message_id"]]
        await live.rt.advance(1_000)
        with anyio.fail_after(30):
            got = await hooks.wait_for(2)
        assert {d.event_id for d in got} == {first["body"]["event"]["id"],
                                             second["body"]["event"]["id"]}
    status, page = await live.req("GET", "/admin/queues/webhooks/dead-letters", token=OPERATOR)
    assert page["dead_letters"] == []
    status, reply = await live.req("POST", "/admin/queues/webhooks/redrive",
                                   f'{{"message_ids": ["{first["message_id"]}"]}}'.encode(),
                                   token=OPERATOR)
    assert status == 200 and reply["redriven"] == []  # redriven already: nothing to do


async def test_events_are_followed_by_cursor(live: Live) -> None:
    """UI-3: a tenant's indexed events page by cursor (by tenant id or name); a follower asking
    with the last cursor gets only what was indexed since, and the same cursor when nothing was."""
    db = live.rt.node.control_db
    assert db is not None
    tenant = await db.create_tenant("acme")
    await create_identity(db, live.rt.node, tenant.id, "bob")
    await live.rt.run_until_idle()
    status, first = await live.req("GET", "/admin/events?tenant=acme", token=OPERATOR)
    assert status == 200 and first["tenant_id"] == tenant.id
    types = [e["type"] for e in first["events"]]
    assert types and all("data" not in e for e in first["events"])
    cursor = first["next_cursor"]
    status, none = await live.req("GET", f"/admin/events?tenant={tenant.id}&cursor={cursor}",
                                  token=OPERATOR)
    assert none["events"] == [] and none["next_cursor"] == cursor
    await create_identity(db, live.rt.node, tenant.id, "carol")
    await live.rt.run_until_idle()
    status, more = await live.req("GET", f"/admin/events?tenant=acme&cursor={cursor}",
                                  token=OPERATOR)
    assert more["events"] and {e["event_id"] for e in more["events"]}.isdisjoint(
        e["event_id"] for e in first["events"])


async def test_queue_and_event_parameters_are_checked(live: Live) -> None:
    """UI-3: a bad queue name, cursor, limit, body or tenant is invalid_request (an unknown
    tenant tenant_not_found); the operator token only; redrive is POST, the others GET."""
    db = live.rt.node.control_db
    assert db is not None
    await db.create_tenant("acme")
    for method, path, body in (
            ("GET", "/admin/queues/bad%20name/dead-letters", b""),
            ("GET", "/admin/queues/webhooks/dead-letters?cursor=zzz", b""),
            ("GET", "/admin/queues/webhooks/dead-letters?limit=0", b""),
            ("GET", "/admin/events", b""),
            ("GET", "/admin/events?tenant=acme&cursor=abc", b""),
            ("POST", "/admin/queues/webhooks/redrive", b'{"message_ids": []}'),
            ("POST", "/admin/queues/webhooks/redrive", b'{"limit": 0}'),
            ("POST", "/admin/queues/webhooks/redrive", b'{"limit": 5000}'),
            ("POST", "/admin/queues/webhooks/redrive", b'{"nope": 1}'),
            ("POST", "/admin/queues/webhooks/redrive", b"not json")):
        status, out = await live.req(method, path, body, token=OPERATOR)
        assert (status, out["err"]["code"]) == (400, "invalid_request"), (path, body, out)
    status, out = await live.req("GET", "/admin/events?tenant=nobody", token=OPERATOR)
    assert (status, out["err"]["code"]) == (404, "tenant_not_found")
    status, out = await live.req("POST", "/admin/queues/webhooks/redrive", b"{}", token=TOKEN)
    assert (status, out["err"]["code"]) == (403, "permission_denied")
    status, _ = await live.req("GET", "/admin/queues/webhooks/redrive", token=OPERATOR)
    assert status == 405
    status, _ = await live.req("POST", "/admin/events?tenant=acme", token=OPERATOR)
    assert status == 405
