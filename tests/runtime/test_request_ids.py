"""Traceability (RT-12, seed sections 3 and 5): a queue delivery and a webhook delivery each mint a
``req_`` id that their log lines carry and their calls carry on (an actor call's envelope, the
webhook POST's header); a call carrying ``actor_key_id`` writes an ``rpc_audit`` line with it, and
every line it writes carries it."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import actors_for_tests as afs
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.platform.logging import bound_request_id, get_logger
from mailbox_actors.platform.queues import Consumer, Message
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import TestRuntime, WebhookReceiver
from mailbox_actors.testing.pytest_plugin import WEBHOOK_SECRET
from mailbox_actors.wire.errors import MailboxActorsError

pytestmark = pytest.mark.anyio
TENANT = afs.TENANT
_log = get_logger("mailbox_actors.test_handler")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    afs.reset_state()
    yield
    afs.reset_state()


def _lines(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    out = []
    for r in caplog.records:
        try:
            doc = json.loads(r.getMessage())
        except ValueError:
            continue
        if doc.get("event") == event:
            out.append(doc)
    return out


async def test_each_queue_delivery_has_a_request_id_its_logs_and_calls_carry(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """RT-12: every message a consumer hands to its handler runs under a fresh req_ id: the
    handler's log lines carry it, an actor call it makes sends it in the envelope (the actor sees
    it as call.request_id), and a handler failure's line carries it too."""
    caplog.set_level(logging.INFO, logger="mailbox_actors")
    seen: list[tuple[str, str | None]] = []

    async def who(actor: Any, call: Call, arg: Any) -> str:
        return call.request_id

    afs.HOOKS["who"] = who
    async with TestRuntime(tmp_path, control=True, objects=afs.ALL_OBJECTS) as rt:
        queues = rt.node.queues
        assert queues is not None
        oid = await afs.new_scratch(rt, "s")

        async def handler(msg: Message) -> None:
            bound = bound_request_id()
            _log.info("test_handler_ran", n=msg.body["n"])
            if msg.body["n"] == 2 and msg.attempts == 1:
                raise RuntimeError("first delivery of n=2 fails")
            got = await rt.node.router.call("scratch", oid, afs.Run(hook="who"),
                                            tenant_id=TENANT)
            seen.append((str(got), bound))

        consumer = Consumer(queues, "jobs", handler, max_batch_timeout_s=0)
        for n in (1, 2):
            await queues.send("jobs", {"v": 1, "kind": "job", "n": n})
        await consumer.drain()
        await rt.advance(1_000)
        await consumer.drain()
    assert len(seen) == 2
    for got, bound in seen:
        assert got == bound and got.startswith("req_")
    assert seen[0][0] != seen[1][0]
    ran = _lines(caplog, "test_handler_ran")
    assert len(ran) == 3 and all(d["request_id"].startswith("req_") for d in ran)
    assert len({d["request_id"] for d in ran}) == 3  # a redelivery is a new request
    [failed] = _lines(caplog, "queue_handler_failed")
    assert failed["request_id"] == next(d["request_id"] for d in ran if d["n"] == 2)


@pytest.mark.actor_runtime(control=True)
async def test_a_webhook_delivery_sends_its_request_id(
        actor_runtime: TestRuntime, webhook_receiver: WebhookReceiver) -> None:
    """RT-12: the runtime's webhook consumers deliver each event with the delivery's own req_ id
    in the x-mailbox-actors-request-id header, one id per delivery."""
    rt = actor_runtime
    db = rt.node.control_db
    assert db is not None
    tenant = await db.create_tenant("acme", webhook_url=webhook_receiver.url,
                                    webhook_secret=WEBHOOK_SECRET)
    await create_identity(db, rt.node, tenant.id, "alice")
    await rt.run_until_idle()
    with anyio.fail_after(30):
        delivered = await webhook_receiver.wait_for(2)
    ids = [d.request_id for d in delivered]
    assert all(i is not None and i.startswith("req_") for i in ids)
    assert len(set(ids)) == 2


async def test_a_call_with_an_actor_key_id_is_audited(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Seed section 5 (actor_key_id "for audit"): a call carrying actor_key_id writes one
    rpc_audit line (namespace, op, object id, tenant, request id, code, and the key id), for a
    refused call too; the lines the call writes meanwhile carry the key id; a call without one
    writes no audit line."""
    caplog.set_level(logging.INFO, logger="mailbox_actors")

    async def note(actor: Any, call: Call, arg: Any) -> None:
        _log.info("test_inside_call")

    afs.HOOKS["note"] = note
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "s")
        await rt.node.router.call("scratch", oid, afs.Run(hook="note"), tenant_id=TENANT,
                                  request_id="req_01KDVDNA00APAAMTSM5XEGMJ24",
                                  actor_key_id="key_ops_7")
        with pytest.raises(MailboxActorsError):
            await rt.node.router.call("scratch", oid, afs.Get(k="x"), tenant_id="intruder",
                                      actor_key_id="key_other")
        await rt.node.router.call("scratch", oid, afs.Get(k="x"), tenant_id=TENANT)
    audit = _lines(caplog, "rpc_audit")
    assert [(d["actor_key_id"], d["op"], d["code"]) for d in audit] == [
        ("key_ops_7", "run", "ok"), ("key_other", "get", "internal_error")]
    first = audit[0]
    assert (first["namespace"], first["object_id"], first["tenant_id"], first["request_id"]) == (
        "scratch", oid, TENANT, "req_01KDVDNA00APAAMTSM5XEGMJ24")
    [inside] = _lines(caplog, "test_inside_call")
    assert inside["actor_key_id"] == "key_ops_7"
    [mismatch] = _lines(caplog, "rpc_owner_mismatch")
    assert mismatch["actor_key_id"] == "key_other"


def test_a_lazily_minted_request_id_is_one_id_for_every_thread_reading_it_first() -> None:
    """RT-12: an alarm run's req_ id is minted at its first read; threads reading it first at
    the same moment (a handler's blocking helpers logging) all get the one id the run keeps."""
    import sys
    import threading

    from mailbox_actors.platform.clock import FakeClock
    from mailbox_actors.platform.ids import Ids
    from mailbox_actors.platform.rng import SeededRng
    from mailbox_actors.runtime.scope import RequestScope

    ids = Ids(FakeClock(1_767_225_600_000), SeededRng(3))
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(200):
            scope = RequestScope(None, None, ids)
            seen: list[str] = []
            start = threading.Barrier(4)

            def read(scope: RequestScope = scope, seen: list[str] = seen,
                     start: threading.Barrier = start) -> None:
                start.wait()
                seen.append(scope.request_id)

            threads = [threading.Thread(target=read) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(set(seen)) == 1 and seen[0] == scope.request_id
    finally:
        sys.setswitchinterval(switch)
