"""A node's HTTP endpoint on a real socket for a test: its tokens and a small request helper."""

from __future__ import annotations

import json
from typing import Any

from mailbox_actors.http.client import HttpPool
from mailbox_actors.testing import TestRuntime

TOKEN = "cluster-token-0123456789abcdef"
OPERATOR = "operator-token-0123456789abcdef"


class Live:
    def __init__(self, rt: TestRuntime, url: str, pool: HttpPool) -> None:
        self.rt = rt
        self.url = url
        self.pool = pool

    async def req(self, method: str, path: str, body: bytes = b"", token: str | None = TOKEN,
                  headers: dict[str, str] | None = None) -> tuple[int, Any]:
        h = {"content-type": "application/json"} | (headers or {})
        if token is not None:
            h["authorization"] = f"Bearer {token}"
        status, out = await self.pool.request(self.url, method, path, h, body, timeout_s=10)
        try:
            return status, json.loads(out)
        except ValueError:
            return status, out.decode()
