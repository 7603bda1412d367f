"""The fault test's workload, receiver and checker end to end on one real node without faults
(CL-16): a history of list appends and reads over HTTP, every event signed and delivered to a real
webhook endpoint, and the checker finding nothing, then finding the one write a test removes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from faults_actor import FaultList
from history_checker import check, load_history
from list_workload import AnyMachine, HistoryLog, ListWorkload
from live_node import OPERATOR, TOKEN
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.node import Node
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.runtime.settings import RuntimeSettings
from webhook_sink import WebhookSink

SECRET = "whsec-faults-0123456789"


@pytest.fixture
async def one_node(tmp_path: Path) -> AsyncIterator[tuple[str, str, WebhookSink]]:
    """A real node on the system clock serving FaultList, its tenant's webhooks to a sink."""
    settings = RuntimeSettings(data_dir=str(tmp_path / "node"),
                               control_db=str(tmp_path / "node" / "control.sqlite"),
                               queues_db=str(tmp_path / "node" / "queues.sqlite"))
    sink = WebhookSink(SECRET)
    url = await sink.start("127.0.0.1")
    node = Node(settings, objects=(*DEFAULT_OBJECTS, FaultList))
    async with node:
        assert node.control_db is not None
        tenant = await node.control_db.create_tenant("faults", webhook_url=url,
                                                     webhook_secret=SECRET)
        app = NodeApp(node, cluster_token=TOKEN, operator_token=OPERATOR, openapi=b"{}")
        server = RpcHttpServer(app)
        port = await server.start("127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{port}", tenant.id, sink
        finally:
            await server.stop()
            await sink.stop()


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_run_without_faults_passes_the_checker(
        one_node: tuple[str, str, WebhookSink], tmp_path: Path) -> None:
    """CL-16: clients append and read through the node for a few seconds at a bounded rate; every
    acknowledged append's event reaches the receiver, signed; the history, written as JSON lines,
    passes the checker; and the same history against a final list missing one acknowledged
    append fails it (``lost``)."""
    url, tenant_id, sink = one_node
    log = HistoryLog(tmp_path / "history.jsonl")
    async with HttpPool() as pool:
        work = ListWorkload(pool, AnyMachine([url]), log, token=TOKEN, tenant_id=tenant_id,
                            keys=10, clients=4, rate=100, seed=7)
        await work.init_keys()
        await work.run(seconds=2.0)
        final = await work.final_lists()
    log.close()
    events = load_history(log.path)
    acked = {(e["key"], e["value"]) for e in events
             if e["type"] == "ok" and e["f"] == "append"}
    reads = [e for e in events if e["type"] == "ok" and e["f"] == "read"]
    assert len(acked) > 50 and reads
    await sink.wait_for(acked, within_s=30)  # the outbox and the webhook consumers, on their own
    assert sink.bad_signatures == 0
    assert check(events, final, sink.delivered) == []
    assert all(e == 0 for lst in final.values() for _, e in lst)  # one machine: no epoch

    key, value = next(iter(sorted(acked)))
    damaged = {k: [x for x in lst if (k, x[0]) != (key, value)] for k, lst in final.items()}
    found = check(events, damaged, sink.delivered)
    assert [v.detail for v in found if v.kind == "lost"] == [
        f"acknowledged append {value!r} (op {_op_of(events, value)}) is missing"]
    assert {v.kind for v in found} <= {"lost", "not_prefix"}  # reads that saw it, if any
    (tmp_path / "final.json").write_text(json.dumps(final))


def _op_of(events: list[dict[str, Any]], value: str) -> int:
    return next(e["op"] for e in events if e["type"] == "invoke" and e.get("value") == value)
