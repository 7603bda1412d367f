"""``CloudflareSink``: a loopback HTTP server answering like Cloudflare's Email Service send API.

For tests of the Cloudflare-style transport (CA-5, CA-8) and for trying ``transport=cloudflare``
by hand. It runs the project's own HTTP server, records each request (path, headers, JSON body)
and answers the queued ``SinkReply``s, then a success with ``result.messageId``. A reply can be
held until ``release`` (a provider that has the request and has not answered yet).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.testing.held_replies import HeldReplies

__all__ = ["CloudflareSink", "Received", "SinkReply", "error_reply"]


@dataclass(frozen=True)
class SinkReply:
    status: int = 200
    body: bytes | None = None  # None: a success envelope with a fresh messageId
    hold: bool = False


def error_reply(code: str | int | None, status: int = 400) -> SinkReply:
    """Cloudflare's error envelope with one error of ``code`` (None: an error without a code)."""
    error: dict[str, Any] = {"message": "scripted failure"}
    if code is not None:
        error["code"] = code
    return SinkReply(status, msgspec.json.encode(
        {"success": False, "errors": [error], "messages": [], "result": None}))


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    json: Any


class CloudflareSink:
    """``async with CloudflareSink() as cf:`` then point a transport at ``cf.url``."""

    def __init__(self, *, host: str = "127.0.0.1", path: str = "/client/v4/accounts/acct/"
                 "email/sending/send") -> None:
        self.host = host
        self.path = path
        self.port = 0
        self.requests: list[Received] = []
        self._replies: deque[SinkReply] = deque()
        self._server = RpcHttpServer(self._app)
        self._holds = HeldReplies()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    def queue(self, *replies: SinkReply) -> None:
        self._replies.extend(replies)

    def release(self) -> None:
        """Let every held reply go; later holds wait for the next release."""
        self._holds.release()

    async def wait_held(self, n: int = 1) -> None:
        """Return once ``n`` replies are being held (their requests have arrived)."""
        await self._holds.wait_held(n)

    async def start(self) -> CloudflareSink:
        self.port = await self._server.start(self.host, 0)
        return self

    async def stop(self) -> None:
        self.release()
        await self._server.stop()

    async def __aenter__(self) -> CloudflareSink:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _app(self, method: str, path: str, headers: Mapping[str, str],
                   body: bytes) -> tuple[int, bytes, str]:
        try:
            doc = msgspec.json.decode(body)
        except msgspec.DecodeError:
            doc = None
        self.requests.append(Received(path, dict(headers), doc))
        reply = self._replies.popleft() if self._replies else SinkReply()
        if reply.hold:
            await self._holds.hold()
        answer = reply.body if reply.body is not None else msgspec.json.encode({
            "success": True, "errors": [], "messages": [],
            "result": {"messageId": f"cf-{len(self.requests)}"}})
        return reply.status, answer, "application/json"
