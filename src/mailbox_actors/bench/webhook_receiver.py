"""The event figures' webhook receiver (PERF; EV-1..EV-5), run in a process of its own, as a
user's endpoint is a service of its own: it notes when each event first arrives and answers 200 at
once, and the bench reads those arrivals from it when it waits for them (``ReceiverProcess``).

Until session 22 the receiver shared the bench's event loop with the callers that make the
events, so each of its answers waited for their turns and held a node's webhook consumer meanwhile
(benchmark.md, "Where a slow event waits, session 21"). Arrival times are ``time.perf_counter()``
of this process, which on Linux is CLOCK_MONOTONIC, the bench's clock too. It keeps the ``data.n``
of each event and its type, never a body.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping

import anyio
import msgspec

from mailbox_actors.bench.servers import HOST, spawn_fixture, stop_fixture
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer, loop_backend_options
from mailbox_actors.webhooks.signature import SIGNATURE_HEADER, verify
from mailbox_actors.wire.events import Event

__all__ = ["EVENT_TYPE", "SECRET", "ReceiverProcess", "Seen", "WebhookReceiver"]

EVENT_TYPE = "identity.bench"
SECRET = "x" * 32  # the bench tenant's webhook secret (a constant: nothing to keep from anyone)
_JSON = "application/json"
SEEN_PATH = "/seen/"  # GET /seen/K: the arrivals from the K-th on, and the counts


class Seen(msgspec.Struct, frozen=True):
    """What ``GET /seen/K`` answers: arrivals ``(data.n, perf_counter)`` from the K-th on, in
    arrival order, and the counts so far."""

    arrivals: list[tuple[int, float]]
    types: dict[str, int]
    duplicates: int
    bad_signatures: int
    malformed: int


_encode_seen = msgspec.json.Encoder().encode
_decode_seen = msgspec.json.Decoder(Seen).decode


class WebhookReceiver:
    """An ``HttpApp``: notes when each event id first arrives (``perf_counter``), deduplicates on
    the id, checks the signature, and answers 200 at once (a bad signature is counted, not refused,
    so a bench bug cannot turn into retries that distort the figures). ``GET /seen/K`` answers a
    ``Seen``."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.first_seen: dict[str, float] = {}
        self.by_n: dict[int, float] = {}  # data.n of EVENT_TYPE events -> first arrival
        self.arrivals: list[tuple[int, float]] = []  # the same, in arrival order
        self.types: Counter[str] = Counter()
        self.duplicates = 0
        self.bad_signatures = 0
        self.malformed = 0
        self._decode = msgspec.json.Decoder(Event).decode

    def seen(self, start: int) -> Seen:
        return Seen(self.arrivals[start:], dict(self.types), self.duplicates,
                    self.bad_signatures, self.malformed)

    async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> tuple[int, bytes, str]:
        t = time.perf_counter()
        if method == "GET" and path.startswith(SEEN_PATH) and path[len(SEEN_PATH):].isdigit():
            return 200, _encode_seen(self.seen(int(path[len(SEEN_PATH):]))), _JSON
        if method != "POST":
            return 405, b'{"err":"POST only"}', _JSON
        try:
            event = self._decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.malformed += 1
            return 400, b'{"err":"not an event"}', _JSON
        if not verify(self.secret, headers.get(SIGNATURE_HEADER, ""), body,
                      now_s=int(time.time())):
            self.bad_signatures += 1
        if event.id in self.first_seen:
            self.duplicates += 1
            return 200, b'{"ok":true}', _JSON
        self.first_seen[event.id] = t
        self.types[event.type] += 1
        n = event.data.get("n")
        if event.type == EVENT_TYPE and isinstance(n, int) and n not in self.by_n:
            self.by_n[n] = t
            self.arrivals.append((n, t))
        return 200, b'{"ok":true}', _JSON


class ReceiverProcess:
    """The receiver's process as the bench sees it: ``url`` to subscribe, and what arrived
    (``by_n``, ``types``, the counts) as of the last ``pull``, which the waits make. Start with
    ``await ReceiverProcess.start()``, end with ``stop()``."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self._proc = proc
        self.port = port
        self.base_url = f"http://{HOST}:{port}"
        self.url = f"{self.base_url}/hook"
        self.by_n: dict[int, float] = {}
        self.types: Counter[str] = Counter()
        self.duplicates = 0
        self.bad_signatures = 0
        self.malformed = 0
        self._pulled = 0  # arrivals read so far
        self._pool = HttpPool(max_per_host=1)

    @classmethod
    async def start(cls) -> ReceiverProcess:
        """``python -m mailbox_actors.bench.webhook_receiver`` (checking ``SECRET``), once it
        printed its port."""
        return cls(*await spawn_fixture("mailbox_actors.bench.webhook_receiver"))

    @property
    def pid(self) -> int:
        return self._proc.pid

    async def pull(self) -> None:
        """Read the arrivals since the last pull, and the counts."""
        status, body = await self._pool.request(self.base_url, "GET", f"{SEEN_PATH}{self._pulled}",
                                                None, b"", timeout_s=30.0)
        if status != 200:
            raise RuntimeError(f"the webhook receiver answered {status} to its arrivals' read")
        seen = _decode_seen(body)
        self.by_n.update(seen.arrivals)
        self._pulled += len(seen.arrivals)
        self.types = Counter(seen.types)
        self.duplicates, self.bad_signatures, self.malformed = (
            seen.duplicates, seen.bad_signatures, seen.malformed)

    async def wait_for(self, ns: Iterable[int], timeout_s: float) -> bool:
        """Wait until every ``data.n`` in ``ns`` has arrived; False if some never did in time."""
        pending = [n for n in ns if n not in self.by_n]
        with anyio.move_on_after(timeout_s):
            while pending:
                await self.pull()
                pending = [n for n in pending if n not in self.by_n]
                if pending:
                    await anyio.sleep(0.01)
            return True
        return False

    async def wait_types(self, type_: str, count: int, timeout_s: float) -> bool:
        with anyio.move_on_after(timeout_s):
            while True:
                await self.pull()
                if self.types[type_] >= count:
                    return True
                await anyio.sleep(0.01)
        return False

    async def stop(self) -> None:
        """Read the last counts (when it still answers), then end the process (its pid)."""
        try:
            with anyio.move_on_after(5):
                await self.pull()
        except Exception:  # the counts are the bench's to report; the process ends anyway
            pass
        finally:
            await self._pool.aclose()
            await stop_fixture(self._proc)


async def _serve() -> None:
    """Serve until the bench closes our standard input (or ends the process)."""
    server = RpcHttpServer(WebhookReceiver(SECRET))
    port = await server.start(HOST, 0)
    print(f"port {port}", flush=True)
    try:
        await anyio.to_thread.run_sync(sys.stdin.buffer.read)  # EOF: the bench is gone
    finally:
        with anyio.CancelScope(shield=True):
            await server.stop(grace_s=1.0)


if __name__ == "__main__":
    anyio.run(_serve, backend_options=loop_backend_options())
