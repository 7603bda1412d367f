"""Bad input (SPEC section 5): an envelope nested very deeply (100,000 levels, in ``req``'s data,
under a field no op has, or as ``req`` itself) is ``invalid_request``, never ``internal_error``,
whether the node that receives it owns the actor or forwards it to its owner. Regression: the
forwarding node's deadline peek raised msgspec's RecursionError, answered 500."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.forwarding import Peers
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.mailbox import MailboxInit, MailboxStatus

pytestmark = pytest.mark.anyio

TOKEN = "cluster-token-0123456789abcdef"
OPERATOR = "operator-token-0123456789abcdef"
DEPTH = 100_000


def _bodies() -> dict[str, bytes]:
    head = ('{"v":1,"tenant_id":"t1","identity_id":"i1","request_id":"req_01KDVDNA00APAAMTSM5XEGMJ24",'
            '"deadline_ms":99999999999999,')
    deep_obj = '{"a":' * DEPTH + "1" + "}" * DEPTH
    deep_list = "[" * DEPTH + "]" * DEPTH
    return {
        "data": (head + '"req":{"op":"emit_event","type":"identity.note","data":{"x":'
                 + deep_obj + "}}}").encode(),
        "extra": (head + '"extra":' + deep_list + ',"req":{"op":"status"}}').encode(),
        "req": (head + '"req":' + deep_obj + "}").encode(),
    }


async def test_deeply_nested_envelopes_are_invalid_request_on_every_node(tmp_path: Path) -> None:
    """Section 5: each deep body, sent over the node's HTTP handler to the owning node and to the
    other one (which forwards it), is answered invalid_request, and the mailbox still works."""
    apps: list[NodeApp] = []

    async def forward(owner: int, method: str, path: str, headers: Any, body: bytes,
                      timeout_s: float) -> tuple[int, bytes]:
        answer = await apps[owner](method, path, headers, body)
        return answer[0], answer[1]

    names = ["node-0", "node-1"]
    async with AsyncExitStack() as stack:
        rts = [await stack.enter_async_context(TestRuntime(
            tmp_path / n, node_name=n, peers=Peers(names, i, forward, cluster_token=TOKEN)))
            for i, n in enumerate(names)]
        apps += [NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR) for rt in rts]
        m = rts[0].id_from_name("identity_mailbox", "deep")
        await rts[0].call("identity_mailbox", m, MailboxInit(), tenant_id="t1", identity_id="i1")
        auth = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        seen: set[int] = set()
        for name, body in _bodies().items():
            for app in apps:
                status, out = (await app("POST", f"/rpc/identity_mailbox/{m}", auth, body))[:2]
                err = json.loads(out)["err"]
                assert err["code"] == "invalid_request", (name, status, err)
                seen.add(status)
        assert seen == {200}, seen  # a handled result: HTTP 200 with the error body, never 500
        st = await rts[1].call("identity_mailbox", m, MailboxStatus(), tenant_id="t1",
                               identity_id="i1")
        assert st["messages"] == 0
