"""Helpers for the Carrier tests: an initialised IdentityMailbox and short calls to it; a node
served over HTTP with both tokens, an operator GET, and the CLI run in-process."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from mailbox_actors.cli import main as cli_main
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node import Node
from mailbox_actors.node.app import NodeApp
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.carrier import GetEmail, Submit
from mailbox_actors.wire.mailbox import MailboxInit

NS = "identity_mailbox"
OWNER = {"tenant_id": "acme", "identity_id": "idn_support"}
TOKEN = "cluster-token-0123456789abcdef"
OPERATOR = "operator-token-0123456789abcdef"


async def mailbox(rt: TestRuntime, name: str = "support") -> str:
    mid = rt.id_from_name(NS, name)
    await rt.call(NS, mid, MailboxInit(), **OWNER)
    return mid


def email(source_id: str = "s-1", **kw: Any) -> Submit:
    fields: dict[str, Any] = {"from_": "support@acme.example", "to": ["bob@example.com"],
                              "subject": "Hello", "text": "Hi Bob"} | kw
    return Submit(source_id=source_id, **fields)


async def call(rt: TestRuntime, mid: str, req: Any) -> Any:
    return await rt.call(NS, mid, req, **OWNER)


async def receipt(rt: TestRuntime, mid: str, source_id: str = "s-1") -> Any:
    return await call(rt, mid, GetEmail(source_id=source_id))


@asynccontextmanager
async def serving(rt: TestRuntime | Node) -> AsyncIterator[str]:
    app = NodeApp(rt.node if isinstance(rt, TestRuntime) else rt, cluster_token=TOKEN,
                  operator_token=OPERATOR)
    server = RpcHttpServer(app, max_body_bytes=1 << 20, request_timeout_s=5)
    port = await server.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.stop(grace_s=1.0)


async def get(url: str, path: str, token: str | None) -> tuple[int, Any]:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    async with HttpPool() as pool:
        status, body = await pool.request(url, "GET", path, headers, b"", timeout_s=5)
    return status, json.loads(body)


async def run_cli(*argv: str) -> tuple[int, list[Any]]:
    """Run ``mailbox-actors ARGV`` in a worker thread (it runs its own event loop) and return
    its exit status and the JSON lines it printed."""
    out = io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out):
            return cli_main(list(argv))
    status = await anyio.to_thread.run_sync(run)
    return status, [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
