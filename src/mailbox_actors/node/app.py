"""The node's HTTP application (RPC-7, CL-2): routes, tokens, forwarding to the owning node.

``POST /rpc/{namespace}/{object_id}`` runs on the node that owns the id (rendezvous hashing over the
cluster's node list) or is forwarded there in one hop. Tokens are compared in constant time; the
operator token is refused where the cluster token is needed and the other way round. Answers never
carry a stack trace, message content or addresses.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import msgspec

from mailbox_actors.node.forwarding import FORWARD_MAX_S, FORWARDED_HEADER
from mailbox_actors.node.node import Node
from mailbox_actors.platform.descriptors import nofile_limit
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError, UnknownPath
from mailbox_actors.wire.shared_replies import IdReply

if TYPE_CHECKING:
    from mailbox_actors.rpc.router import Router

# /admin/{root}/... of operator inspection (node.inspection_http, imported at its first request)
INSPECTION_ROOTS = frozenset({"actors", "inspect", "queues", "events"})

__all__ = ["FORWARDED_HEADER", "FORWARD_MAX_S", "NodeApp", "Response"]

Plain = tuple[int, bytes, str]
Response = Plain | tuple[int, bytes, str, Mapping[str, str]]
_JSON = "application/json"
_ENC = msgspec.json.Encoder()


def _compare_first(a: bytes, b: bytes) -> bool:
    """``hmac.compare_digest``, imported at the first token compared (``_compare`` is then that
    function itself): ``hmac`` loads OpenSSL's digests, which the first answer (``/healthz``, no
    token) does not need."""
    global _compare
    from hmac import compare_digest

    _compare = compare_digest
    return compare_digest(a, b)


_compare: Callable[[bytes, bytes], bool] = _compare_first


def error_response(code: ErrorCode, message: str, *,
                   details: dict[str, Any] | None = None) -> Plain:
    body = MailboxActorsError(code, message, details=details).to_body()
    return code.http_status, _ENC.encode({"err": body}), _JSON


class NodeApp:
    """``async __call__(method, path, headers, body) -> (status, body, content_type)``."""

    def __init__(self, node: Node, *, cluster_token: str, operator_token: str,
                 openapi: bytes | Callable[[], bytes] = b"{}",
                 content_allowed: bool = False) -> None:
        self.node = node
        self._content_allowed = content_allowed  # inspection may show content (UI-1, UI-4)
        self._inspection: Any = None  # made at the first inspection request
        self._cluster = cluster_token.encode()
        # None for an empty token (an embedding's mistake): _auth then refuses every caller.
        self._cluster_header = b"Bearer " + self._cluster if self._cluster else None
        self._operator = operator_token.encode()
        # The cluster (peers, owner of each id, the hop) is the node's, given when it was made.
        self._placement = node.forwarding
        self.peers = self._placement.peers  # node names in cluster order; empty: a single node
        self.self_index = self._placement.self_index
        # The document, or how to make it at its first request (not at every start: it imports
        # every object's wire types and the package metadata).
        self._openapi = openapi
        self._log = get_logger("mailbox_actors.http")
        self._codes: dict[int, tuple[tuple[str, str], ...]] = {}  # status -> its label, made once
        # The node's router, taken at the first call (serve makes it after its first answer).
        self._router: Router | None = None
        self._ns_labels: dict[str, tuple[tuple[str, str], ...]] = {}  # namespace -> its label
        self._first = True  # until the first answer (the node may then open what it put off)
        m = node.metrics
        m.describe("rpc_request_duration_seconds", "Time to answer POST /rpc, by namespace",
                   "histogram")
        m.describe("http_responses_total", "HTTP responses of the node's endpoints by status",
                   "counter", ("code",))

    # ---- auth (REL-3) ----------------------------------------------------------------------

    def _auth(self, headers: Mapping[str, str], operator: bool) -> Response | None:
        value = headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return error_response(ErrorCode.UNAUTHENTICATED,
                                  "missing 'Authorization: Bearer <token>' header")
        given = token.strip().encode()
        want, other = (self._operator, self._cluster) if operator else (self._cluster,
                                                                       self._operator)
        if _compare(given, want):
            return None
        if _compare(given, other):
            return error_response(
                ErrorCode.PERMISSION_DENIED,
                "this endpoint needs the " + ("operator" if operator else "cluster")
                + " token, not the " + ("cluster" if operator else "operator") + " token")
        return error_response(ErrorCode.UNAUTHENTICATED, "wrong token")

    # ---- routing ---------------------------------------------------------------------------

    async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> Response:
        parts = path.split("/")
        if len(parts) == 4 and parts[1] == "rpc" and method == "POST" and "?" not in path:
            # The RPC itself (nearly every request): straight to it, one coroutine fewer than
            # through _route, whose answer it is for the same request.
            try:
                answer = await self._rpc(parts[2], parts[3], headers, body, path)
            except MailboxActorsError as e:
                answer = e.code.http_status, _ENC.encode({"err": e.to_body()}), _JSON
        else:
            answer = await self._route(method, path, headers, body)
        code = self._codes.get(answer[0])
        if code is None:
            code = self._codes[answer[0]] = (("code", str(answer[0])),)
        self.node.metrics.inc("http_responses_total", code)
        if self._first:
            self._first = False
            self.node.answered()
        return answer

    async def _route(self, method: str, path: str, headers: Mapping[str, str],
                     body: bytes) -> Response:
        full_path = path
        path, _, query = path.partition("?")
        parts = path.split("/")
        try:
            if len(parts) == 4 and parts[1] == "rpc":
                if method != "POST":
                    return _not_allowed("POST")
                return await self._rpc(parts[2], parts[3], headers, body, path)
            if path == "/healthz":
                return self._get_only(method) or (200, _ENC.encode(self.health()), _JSON)
            if path == "/metrics":
                # Every family from the first scrape: the webhooks' too, declared once opened.
                await self.node.shared_state_opened()
                return self._get_only(method) or (
                    200, self.node.metrics.render_prometheus().encode(),
                    "text/plain; version=0.0.4; charset=utf-8")
            if path == "/openapi.json":
                return self._get_only(method) or (200, self._openapi_document(), _JSON)
            if len(parts) == 5 and parts[1] == "ids" and parts[3] == "by-name":
                return self._get_only(method) or self._auth(headers, False) or self._id(
                    lambda: self.node.id_from_name(parts[2], unquote(parts[4])))
            if len(parts) == 4 and parts[1] == "ids" and parts[3] == "unique":
                if method != "POST":
                    return _not_allowed("POST")
                return self._auth(headers, False) or self._id(
                    lambda: self.node.new_unique_id(parts[2]))
            if len(parts) in (4, 5) and parts[1] == "admin" and parts[2] == "deliveries":
                # /admin/deliveries/{mailbox id}, or /admin/deliveries/{namespace}/{id}
                namespace = "identity_mailbox" if len(parts) == 4 else parts[3]
                return self._get_only(method) or self._auth(headers, True) or (
                    await self._deliveries(namespace, parts[-1], query, headers, full_path))
            if path == "/admin/status":
                return self._get_only(method) or self._auth(headers, True) or (
                    200, _ENC.encode(await self.status()), _JSON)
            if len(parts) >= 3 and parts[1] == "admin" and parts[2] in INSPECTION_ROOTS:
                await self.node.shared_state_opened()  # the queues and tenants they read
                allowed = self.inspection.method_for(parts)
                if method != allowed and not (allowed == "GET" and method == "HEAD"):
                    return _not_allowed(allowed)
                return self._auth(headers, True) or (
                    await self.inspection.answer(parts, query, headers, body))
        except MailboxActorsError as e:
            return e.http_status, _ENC.encode({"err": e.to_body()}), _JSON
        no_path = UnknownPath("no such endpoint", endpoints=[
            "/rpc/{namespace}/{object_id}", "/healthz", "/metrics", "/openapi.json", "/ids/..."])
        return no_path.http_status, _ENC.encode({"err": no_path.to_body()}), _JSON

    @property
    def inspection(self) -> Any:
        """The inspection endpoints (UI-1, ``node.inspection_http``), made when first asked."""
        if self._inspection is None:
            from mailbox_actors.node.inspection import Inspector
            from mailbox_actors.node.inspection_http import InspectionRoutes
            from mailbox_actors.node.queue_inspection import QueueInspector

            inspector = Inspector(self.node)
            self._inspection = InspectionRoutes(
                inspector, QueueInspector(self.node, inspector.cursors), self._placement,
                content_allowed=self._content_allowed)
        return self._inspection

    def _openapi_document(self) -> bytes:
        if not isinstance(self._openapi, bytes):
            self._openapi = self._openapi()  # made once, at the first request for it
        return self._openapi

    def _get_only(self, method: str) -> Response | None:
        return None if method in ("GET", "HEAD") else _not_allowed("GET")

    def _id(self, make: Callable[[], str]) -> Response:
        return 200, _ENC.encode(IdReply(id=make())), _JSON  # errors: __call__ answers them

    async def _rpc(self, namespace: str, object_id: str, headers: Mapping[str, str], body: bytes,
                   path: str) -> Response:
        # The cluster token as every client sends it is one constant-time comparison; anything
        # else takes _auth's whole reading (scheme case, spacing, the operator token's answer).
        if self._cluster_header is None or not _compare(
                headers.get("authorization", "").encode(), self._cluster_header):
            denied = self._auth(headers, False)
            if denied is not None:
                return denied
        owner = self._placement.owner(namespace, object_id)
        if owner != self.self_index:
            if FORWARDED_HEADER in headers:
                # Never open a copy of an actor this node does not own (RT-3): a request already
                # forwarded once that still lands on a non-owner means the node lists disagree.
                return 200, _ENC.encode({"err": MailboxActorsError(
                    ErrorCode.UNAVAILABLE, "misrouted: this node does not own the object",
                    details={"owner": self.peers[owner]}).to_body()}), _JSON
            return await self._forward_to(owner, path, headers, body)
        started = time.perf_counter()
        router = self._router
        if router is None:
            router = self._router = self.node.router
        out = await router.call_bytes(namespace, object_id, body)
        labels = self._ns_labels.get(namespace)
        if labels is None:
            labels = (("namespace", namespace if router.has_namespace(namespace)
                       else "?"),)
            if labels[0][1] != "?":  # only known names are kept: the table stays bounded
                self._ns_labels[namespace] = labels
        self.node.metrics.observe("rpc_request_duration_seconds", time.perf_counter() - started,
                                  labels)
        return 200, out, _JSON

    async def _deliveries(self, namespace: str, object_id: str, query: str,
                          headers: Mapping[str, str], full_path: str) -> Response:
        """CA-10: one page of a Carrier user's delivery records (an IdentityMailbox's, a
        Notifier's, a user's own actor's), read on the node that owns it without activating it
        (the operator token was checked)."""
        self.node.router.namespace(namespace)  # an unknown one is invalid_request, not routed
        owner = self._owner(namespace, object_id)
        if owner != self.self_index and FORWARDED_HEADER not in headers:
            return await self._forward_to(owner, full_path, headers, b"", method="GET")
        args = parse_qs(query, keep_blank_values=True)
        after = args.get("after", [None])[-1] or None
        given = args.get("limit")
        try:
            limit = None if given is None else int(given[-1])  # None: the default page
        except ValueError:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST, "limit must be an integer",
                                     details={"field": "limit"}) from None
        page = self.node.inspect_deliveries(object_id, namespace=namespace, after=after,
                                            limit=limit)
        return 200, _ENC.encode(page), _JSON

    def _owner(self, namespace: str, object_id: str) -> int:
        return self._placement.owner(namespace, object_id)

    async def _forward_to(self, owner: int, path: str, headers: Mapping[str, str],
                          body: bytes, method: str = "POST") -> Plain:
        return await self._placement.forward_to(owner, path, headers, body, method)

    # ---- observing -------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``/healthz``, answered without a token: whether this process serves, nothing more
        (OPS-7: no path, no counts). The pid lets a supervisor tell its own child on the port."""
        h = self.node.health()
        return {"status": h["status"], "node": h["node"], "pid": h["pid"]}

    async def status(self) -> dict[str, Any]:
        await self.node.shared_state_opened()  # the queues' depths
        s = self.node.health()
        s["cluster_nodes"] = len(self.peers) or 1
        if self.node.queues is not None:
            from mailbox_actors.webhooks.publish import WEBHOOKS_QUEUE  # loaded with the queues

            stats = await self.node.queues.stats()
            for name in (WEBHOOKS_QUEUE, f"{WEBHOOKS_QUEUE}-dlq"):  # shown even when empty
                stats.setdefault(name, {"ready": 0, "delayed": 0, "in_flight": 0,
                                        "dead_letters": 0})
            s["queues"] = stats
        s["alarms_fired"] = 0 if self.node.scheduler is None else self.node.scheduler.fired
        s["activations"] = self.node.host.activations
        s["max_active_actors"] = self.node.settings.max_active_actors  # as descriptors allow
        s["nofile_limit"] = nofile_limit()
        s["evictions"] = self.node.host.evictions
        s["pid"] = os.getpid()
        return s


def _not_allowed(allowed: str) -> Response:
    allow = "GET, HEAD" if allowed == "GET" else allowed  # RFC 9110 15.5.6: a 405 lists them
    status, body, ctype = error_response(ErrorCode.METHOD_NOT_ALLOWED,
                                         f"use {allowed} on this endpoint",
                                         details={"allow": allowed})
    return status, body, ctype, {"allow": allow}
