"""The RPC client for host services (RPC-8): pooled keep-alive HTTP straight to the owning node.

It fills in ``request_id`` and ``deadline_ms`` (10 s; 30 s for ``ingest`` and ``submit``), maps an
``err`` body to ``RpcError`` carrying the code, maps connection failures and unexpected statuses to
``unavailable``, and retries only retryable errors of the ops the namespace's class declares
idempotent (``wire/idempotency``), with backoff, inside the deadline. Id lookups go to any node and
fail over to the next within their timeout. Works from plain asyncio and from anyio code.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec

from mailbox_actors.core.backoff import exponential_delay_ms
from mailbox_actors.core.placement import Rendezvous, owner_index
from mailbox_actors.http.client import HttpPool
from mailbox_actors.platform.clock import Clock, SystemClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.locks import lock_holder
from mailbox_actors.platform.node_file import read_node_file
from mailbox_actors.platform.rng import Rng, SystemRng
from mailbox_actors.rpc.deadlines import default_deadline_ms
from mailbox_actors.rpc.tokens import read_token
from mailbox_actors.wire.envelope import ENVELOPE_VERSION, Envelope, RpcReply
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.idempotency import IDEMPOTENT_OPS
from mailbox_actors.wire.shared_replies import IdReply

__all__ = ["IDEMPOTENT_OPS", "Client", "RpcError", "read_token"]

_ENC = msgspec.json.Encoder()
_REPLY = msgspec.json.Decoder(RpcReply)
_ID = msgspec.json.Decoder(IdReply)
_HANDLED = {200, 400, 401, 403, 404, 405, 413}


class RpcError(MailboxActorsError):
    """An ``err`` result (or a transport failure, as ``unavailable``). ``.code`` is the ErrorCode."""


class Client:
    """``async with Client(nodes, token) as c: await c.call("tenant_quota", id, {...})``.

    ``nodes`` is the cluster's node list as (name, url) pairs in cluster order (a single URL string
    works for one node). ``Client.from_data_dir(DIR)`` reads a local cluster's cluster.json and
    token file.
    """

    def __init__(self, nodes: Sequence[tuple[str, str]] | str, token: str, *,
                 clock: Clock | None = None, rng: Rng | None = None,
                 max_attempts: int = 5, request_timeout_s: float | None = None,
                 idempotent_ops: Mapping[str, frozenset[str]] = IDEMPOTENT_OPS,
                 id_timeout_s: float = 10.0, discover: bool = False) -> None:
        """``discover``: before the first call, ask the first URL for ``GET /cluster``; a machine
        of a cluster on many machines answers its slot map, which the client then routes by
        (CL-12); anything else (a node, a local cluster) is routed as before."""
        if isinstance(nodes, str):
            nodes = [("node-0", nodes)]
        if not nodes:
            raise ValueError("the node list is empty")
        self.names = [n for n, _ in nodes]
        self.urls = [u.rstrip("/") for _, u in nodes]
        self._auth = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        self.clock = clock or SystemClock()
        self.rng = rng or SystemRng()
        self._ids = Ids(self.clock, self.rng)
        self.max_attempts = max_attempts
        self._timeout = request_timeout_s
        # Per namespace, as each actor class declares them (OPS-6); another deployment's classes
        # bring their own table.
        self.idempotent_ops = idempotent_ops
        self.id_timeout_s = id_timeout_s if request_timeout_s is None else min(
            id_timeout_s, request_timeout_s)
        self._pool = HttpPool()
        # Many machines (CL-12): slot k's holder's URL from GET /cluster (None: one machine or a
        # local cluster, routed by the node list).
        self._slots: Rendezvous | None = None
        self._slot_urls: list[str | None] | None = None
        self._discover = discover

    @classmethod
    async def from_cluster(cls, url: str, token: str, **kw: Any) -> Client:
        """A client of a cluster on many machines: it routes each id to its slot's holder by the
        map ``GET /cluster`` gives on any machine (CL-12), reread when a call finds it stale. It
        never needs the database's credentials."""
        client = cls([("entry", url)], token, **kw)
        try:
            await client.refresh_map()
        except BaseException:
            await client.aclose()
            raise
        return client

    async def refresh_map(self) -> None:
        """Read the slot map again from any machine that answers (CL-12)."""
        last: Exception | None = None
        for base in list(self.urls):
            try:
                status, body = await self._pool.request(base, "GET", "/cluster", self._auth, b"",
                                                        timeout_s=self.id_timeout_s)
            except (OSError, ConnectionError, TimeoutError) as e:
                last = e
                continue
            if status != 200:
                raise self._error_from(status, body, None)
            self.apply_map(json.loads(body))
            return
        raise RpcError(ErrorCode.UNAVAILABLE, "no machine answered GET /cluster",
                       details={"tried": len(self.urls), "error": type(last).__name__})

    async def _discover_map(self) -> None:
        self._discover = False
        try:
            status, body = await self._pool.request(self.urls[0], "GET", "/cluster", self._auth,
                                                    b"", timeout_s=self.id_timeout_s)
        except (OSError, ConnectionError, TimeoutError):
            return  # the call itself says what is wrong
        if status == 200:
            try:
                self.apply_map(json.loads(body))
            except (ValueError, KeyError, TypeError):
                pass

    def apply_map(self, doc: Mapping[str, Any]) -> None:
        """Route by this ``GET /cluster`` answer (CL-12) from now on."""
        machines = doc.get("machines") or {}
        if machines:
            self.names = list(machines)
            self.urls = [str(u).rstrip("/") for u in machines.values()]
        count = int(doc["slots"])
        if self._slots is None or len(self._slots.names) != count:
            self._slots = Rendezvous([f"slot-{k}" for k in range(count)])
        self._slot_urls = [row.get("url") for row in doc["map"]]

    @classmethod
    def from_data_dir(cls, data_dir: str | Path, *, env: Mapping[str, str] | None = None,
                      **kw: Any) -> Client:
        """Connect to the local cluster (or single node) whose data directory is ``data_dir``,
        with the cluster token ``read_token`` finds (MAILBOX_ACTORS_TOKEN first)."""
        d = Path(data_dir)
        token = read_token(d, "cluster", env)
        try:
            doc = json.loads((d / "cluster.json").read_text())  # written by the supervisor
            nodes = [(n["name"], n["url"]) for n in doc["nodes"]]
        except FileNotFoundError:
            if "url" not in kw and lock_holder(d) is None:
                # Said plainly, not as "node-0 unreachable, retry with backoff" (OPS-9).
                raise RpcError(ErrorCode.UNAVAILABLE, f"no cluster is running on {d} (start one "
                               f"with 'mailbox-actors cluster --data {d}')",
                               details={"data": str(d)}) from None
            recorded = read_node_file(d)  # a single node records where it listens
            nodes = [("node-0", kw["url"]) if "url" in kw else recorded
                     or ("node-0", "http://127.0.0.1:8787")]
        kw.pop("url", None)
        return cls(nodes, token, **kw)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._pool.aclose()

    def owner_url(self, namespace: str, object_id: str) -> str:
        slot_urls, slots = self._slot_urls, self._slots
        if slot_urls is not None and slots is not None:  # many machines: the slot's holder
            url = slot_urls[slots.index(namespace, object_id)]
            return url.rstrip("/") if url else self.urls[secrets.randbelow(len(self.urls))]
        return self.urls[owner_index(self.names, namespace, object_id)]

    # ---- ids -------------------------------------------------------------------------------

    async def id_from_name(self, namespace: str, name: str) -> str:
        from urllib.parse import quote

        return await self._id("GET", f"/ids/{namespace}/by-name/{quote(name, safe='')}")

    async def new_unique_id(self, namespace: str) -> str:
        return await self._id("POST", f"/ids/{namespace}/unique")

    async def _id(self, method: str, path: str) -> str:
        """Any node answers an id: start at a random one, and on a transport failure try the
        next, all within ``id_timeout_s`` (OPS-6). Each node gets an equal share of the time
        left, so a node that accepts and never answers (stopped, wedged) cannot use it all."""
        deadline = anyio.current_time() + self.id_timeout_s
        first = secrets.randbelow(len(self.urls))
        last: RpcError | None = None
        for k in range(len(self.urls)):
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                break
            url = self.urls[(first + k) % len(self.urls)]
            try:
                status, body = await self._send(url, method, path, b"",
                                                remaining / (len(self.urls) - k))
            except RpcError as e:  # this node cannot be reached: the next may
                last = e
                continue
            if status == 200:
                return _ID.decode(body).id
            raise self._error_from(status, body, None)
        if last is not None and anyio.current_time() < deadline:
            raise last
        raise RpcError(ErrorCode.TIMEOUT, f"no node answered the id lookup within "
                       f"{self.id_timeout_s:g} s", details={"tried": len(self.urls)})

    # ---- calls -----------------------------------------------------------------------------

    async def call(self, namespace: str, object_id: str, req: Any, *,
                   tenant_id: str | None = None, identity_id: str | None = None,
                   deadline_ms: int | None = None, request_id: str | None = None,
                   actor_key_id: str | None = None, idempotent: bool | None = None) -> Any:
        """Call an object; returns the ``ok`` value (plain JSON types) or raises ``RpcError``.

        ``req`` is a request Struct or a dict with an ``"op"`` key.
        """
        op = _op_of(req)
        now = self.clock.now_ms()
        deadline = deadline_ms if deadline_ms is not None else now + default_deadline_ms(op)
        rid = request_id or self._ids.new_id("req")
        body = _ENC.encode(Envelope(v=ENVELOPE_VERSION, tenant_id=tenant_id,
                                     identity_id=identity_id, request_id=rid,
                                     actor_key_id=actor_key_id, deadline_ms=deadline, req=req))
        path = f"/rpc/{namespace}/{object_id}"
        if self._discover:
            await self._discover_map()
        url = self.owner_url(namespace, object_id)
        retry_ok = (op in self.idempotent_ops.get(namespace, frozenset()) if idempotent is None
                    else idempotent)
        attempt = 0
        while True:
            attempt += 1
            if attempt > 1:
                now = self.clock.now_ms()
            remaining_s = (deadline - now) / 1000
            if remaining_s <= 0:
                raise RpcError(ErrorCode.TIMEOUT, "the deadline passed before an answer came",
                               request_id=rid)
            timeout = min(remaining_s, self._timeout) if self._timeout else remaining_s
            try:  # the pool itself, not _send: one coroutine fewer on every call
                status, out = await self._pool.request(url, "POST", path, self._auth, body,
                                                       timeout_s=timeout)
                if status == 200:
                    reply = _REPLY.decode(out)
                    if reply.err is None:
                        return reply.ok
                err = self._result(status, out, rid)
            except (OSError, ConnectionError, TimeoutError) as e:
                err = _unreachable(url, e)
            except RpcError as e:
                err = e
            except msgspec.DecodeError:
                err = _not_a_result(rid)
            else:
                return err
            if not (retry_ok and err.code.retryable and attempt < self.max_attempts):
                raise err
            if self._slot_urls is not None and err.code == ErrorCode.UNAVAILABLE:
                try:  # a stale map costs this one unavailable (CL-12)
                    await self.refresh_map()
                except RpcError:
                    pass
                url = self.owner_url(namespace, object_id)
            delay = exponential_delay_ms(attempt, 50, 2_000, 0.5, self.rng.random())
            if err.code == ErrorCode.RATE_LIMITED and err.details:
                delay = max(delay, int(err.details.get("retry_after_ms", 0)))
            if self.clock.now_ms() + delay >= deadline:
                raise err
            await anyio.sleep(delay / 1000)

    async def wait_for_message(self, mailbox_id: str, *, tenant_id: str, identity_id: str,
                               timeout_ms: int = 30_000, poll_interval_ms: int = 250,
                               from_: str | None = None, to: str | None = None,
                               subject_contains: str | None = None,
                               header: tuple[str, str] | None = None,
                               received_after_ms: int | None = None) -> dict[str, Any]:
        """Wait for a message into an IdentityMailbox (IN-4): register a durable wait, then poll
        it every ``poll_interval_ms`` of the client's clock until it matches. Returns
        ``{"status":"matched","message_id","thread_id"}``; raises ``RpcError`` ``timeout`` after
        ``timeout_ms``. A message stored before the wait counts only with ``received_after_ms``
        (pass the time before sending). A node that is down meanwhile is polled again."""
        deadline = self.clock.now_ms() + timeout_ms
        wanted = {"from": from_, "to": to, "subject_contains": subject_contains,
                  "header": None if header is None else {"name": header[0], "value": header[1]},
                  "received_after_ms": received_after_ms}
        register = {"op": "register_wait", "filter": wanted, "expires_at_ms": deadline}
        wait_id: str | None = None
        while True:
            try:
                if wait_id is None:
                    # A lost answer registers a second wait on retry: harmless, it just expires.
                    wait_id = (await self.call(
                        "identity_mailbox", mailbox_id, register, tenant_id=tenant_id,
                        identity_id=identity_id, deadline_ms=deadline, idempotent=True))["wait_id"]
                got: dict[str, Any] = await self.call(
                    "identity_mailbox", mailbox_id, {"op": "wait_poll", "wait_id": wait_id},
                    tenant_id=tenant_id, identity_id=identity_id, deadline_ms=deadline)
            except RpcError as e:  # a node down meanwhile (restarting): try again until the end
                if not e.code.retryable or self.clock.now_ms() >= deadline:
                    raise
            else:
                if got["status"] == "matched":
                    return got
                if got["status"] == "expired":
                    break
            left = deadline - self.clock.now_ms()
            if left < 0:
                break
            # The clock decides how to wait: a real pause, or (FakeClock) until a test advances.
            await self.clock.sleep_until(self.clock.now_ms() + min(poll_interval_ms, left + 1),
                                         anyio.Event())
        raise RpcError(ErrorCode.TIMEOUT, f"no matching message within {timeout_ms} ms",
                       details={"wait_id": wait_id})

    def _result(self, status: int, out: bytes, rid: str) -> Any:
        if status != 200:
            raise self._error_from(status, out, rid)
        try:
            reply = _REPLY.decode(out)
        except msgspec.DecodeError:
            raise _not_a_result(rid) from None
        if reply.err is not None:
            raise RpcError.from_body(reply.err)
        return reply.ok

    def _error_from(self, status: int, body: bytes, rid: str | None) -> RpcError:
        if status in _HANDLED:
            try:
                reply = _REPLY.decode(body)
                if reply.err is not None:
                    return RpcError.from_body(reply.err)  # type: ignore[return-value]
            except msgspec.DecodeError:
                pass
        return RpcError(ErrorCode.UNAVAILABLE, f"the node answered HTTP {status}",
                        details={"http_status": status}, request_id=rid)

    async def _send(self, url: str, method: str, path: str, body: bytes,
                    timeout_s: float) -> tuple[int, bytes]:
        try:
            return await self._pool.request(url, method, path, self._auth, body,
                                            timeout_s=timeout_s)
        except (OSError, ConnectionError, TimeoutError) as e:
            raise _unreachable(url, e) from None


def _unreachable(url: str, e: BaseException) -> RpcError:
    return RpcError(ErrorCode.UNAVAILABLE, f"cannot reach {url}: {type(e).__name__}",
                    details={"url": url})


def _not_a_result(rid: str) -> RpcError:
    return RpcError(ErrorCode.UNAVAILABLE, "the node answered with a body that is not a result",
                    request_id=rid)


def _op_of(req: Any) -> str:
    if isinstance(req, dict):
        op = req.get("op")
        if not isinstance(op, str):
            raise TypeError("a request dict needs an 'op' string")
        return op
    cfg = getattr(type(req), "__struct_config__", None)
    if cfg is None or cfg.tag is None:
        raise TypeError("req must be a tagged request Struct or a dict with an 'op' key")
    return str(cfg.tag)
