"""``WebhookReceiver``: a loopback HTTP endpoint that receives webhook deliveries and checks
their signatures (TK-1), as a subscriber's endpoint would.

Each delivery is recorded with its event id, type, attempt, JSON body and whether its
``x-mailbox-actors-signature`` verifies with the receiver's secret (``webhooks.signature.verify``,
against the receiver's clock: the test's FakeClock when given one). A delivery whose signature
does not verify is answered 401, as a receiver following the README should; the answers to give
the next deliveries can be queued (a 500, a slow receiver is the test's to script).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.webhooks.signature import (
    ATTEMPT_HEADER,
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    verify,
)

__all__ = ["Delivery", "WebhookReceiver"]


@dataclass(frozen=True)
class Delivery:
    path: str
    event_id: str | None
    event_type: str | None
    attempt: int | None
    verified: bool
    json: Any
    status: int  # what the receiver answered
    request_id: str | None = None  # the delivery's req_ id (REQUEST_ID_HEADER)


class WebhookReceiver:
    """``async with WebhookReceiver(secret) as hooks:`` then subscribe ``hooks.url``."""

    def __init__(self, secret: str, *, host: str = "127.0.0.1", path: str = "/hooks",
                 now_ms: Callable[[], int] | None = None, tolerance_s: int = 300) -> None:
        self.secret = secret
        self.host = host
        self.path = path
        self.port = 0
        self.deliveries: list[Delivery] = []
        self._now_ms = now_ms
        self._tolerance_s = tolerance_s
        self._answers: deque[int] = deque()
        self._server = RpcHttpServer(self._app)
        self._changed = anyio.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    @property
    def verified(self) -> list[Delivery]:
        """The deliveries whose signature checked out, in arrival order."""
        return [d for d in self.deliveries if d.verified]

    def answer(self, *statuses: int) -> None:
        """Answer the next verified deliveries with these statuses (then 200)."""
        self._answers.extend(statuses)

    async def wait_for(self, n: int) -> list[Delivery]:
        """Wait until ``n`` verified deliveries arrived (the caller bounds the wait)."""
        while len(self.verified) < n:
            await self._changed.wait()
        return self.verified

    async def start(self) -> WebhookReceiver:
        self.port = await self._server.start(self.host, 0)
        return self

    async def stop(self) -> None:
        await self._server.stop()

    async def __aenter__(self) -> WebhookReceiver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _now_s(self) -> int:
        return (self._now_ms() // 1000) if self._now_ms is not None else int(time.time())

    async def _app(self, method: str, path: str, headers: Mapping[str, str],
                   body: bytes) -> tuple[int, bytes, str]:
        lower = {k.lower(): v for k, v in headers.items()}
        ok = method == "POST" and verify(self.secret, lower.get(SIGNATURE_HEADER, ""), body,
                                         now_s=self._now_s(), tolerance_s=self._tolerance_s)
        try:
            doc = msgspec.json.decode(body)
        except msgspec.DecodeError:
            doc = None
        attempt = lower.get(ATTEMPT_HEADER, "")
        status = (self._answers.popleft() if self._answers else 200) if ok else 401
        self.deliveries.append(Delivery(path, lower.get(EVENT_ID_HEADER),
                                        lower.get(EVENT_TYPE_HEADER),
                                        int(attempt) if attempt.isdigit() else None, ok, doc,
                                        status, lower.get(REQUEST_ID_HEADER)))
        self._changed.set()
        self._changed = anyio.Event()
        return status, b'{"ok":true}' if status < 300 else b'{"ok":false}', "application/json"
