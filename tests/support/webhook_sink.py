"""A real webhook endpoint for the fault test (CL-16, CL-15): it checks each POST's signature and
keeps the (key, value) of every ``fault_list.appended`` event it accepts, answering 2xx.

A redelivered event (a machine that died after posting, before its ack) is accepted again and
kept once: delivery is at least once, and the checker asks only that each acknowledged write's
event arrived. Events with a bad signature are answered 401 and counted, never kept.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Set

import anyio

from faults_actor import APPENDED
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.webhooks.delivery import SIGNATURE_HEADER, verify

__all__ = ["WebhookSink"]


class WebhookSink:
    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.delivered: set[tuple[str, str]] = set()
        self.posts = 0
        self.bad_signatures = 0
        self._arrived = anyio.Event()
        self._server: RpcHttpServer | None = None
        self.url = ""

    async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> tuple[int, bytes, str]:
        self.posts += 1
        signature = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER.lower()),
                         "")
        if method != "POST" or not verify(self.secret, signature, body, now_s=int(time.time())):
            self.bad_signatures += 1
            return 401, b"", "text/plain"
        event = json.loads(body)
        if event.get("type") == APPENDED:
            self.delivered.add((event["data"]["key"], event["data"]["value"]))
            self._arrived.set()
            self._arrived = anyio.Event()
        return 204, b"", "text/plain"

    async def wait_for(self, wanted: Set[tuple[str, str]], within_s: float) -> None:
        """Until every (key, value) of ``wanted`` has arrived (bounded)."""
        with anyio.fail_after(within_s):
            while not wanted <= self.delivered:
                await self._arrived.wait()

    async def start(self, host: str) -> str:
        self._server = RpcHttpServer(self)
        port = await self._server.start(host, 0)
        self.url = f"http://{host}:{port}/hooks"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace_s=0.5)
