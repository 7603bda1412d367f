"""A machine's HTTP application (CL-10, CL-12): requests for an id go to its slot.

``POST /rpc/{namespace}/{object_id}`` runs on the slot's node when this machine serves the slot;
when the map from PostgreSQL names another holder, it goes there in one hop (marked forwarded);
otherwise, and for a forwarded request that still lands on a non-holder (a stale map), it is
answered ``unavailable`` naming slot and epoch, without any actor file opened. ``GET /cluster``
gives clients the slot map (never the database's credentials). Everything else (health, metrics,
ids, OpenAPI, status) is the machine's front node's.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

import msgspec

from mailbox_actors.cluster.machine import Machine
from mailbox_actors.node.app import Response, error_response
from mailbox_actors.node.forwarding import FORWARDED_HEADER
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["MachineApp"]

_JSON = "application/json"
_ENC = msgspec.json.Encoder()
_OK = (("code", "200"),)


class MachineApp:
    """``async __call__(method, path, headers, body)``, as ``NodeApp``."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.front = machine.front_app
        self._bearer = f"Bearer {machine.cluster_token}".encode()
        self._operator = f"Bearer {machine.operator_token}".encode()
        self._metrics = machine.front.metrics  # the machine's /metrics is its front node's

    def _authorised(self, headers: Mapping[str, str], operator: bool = False) -> bool:
        given = headers.get("authorization", "").encode()
        return hmac.compare_digest(given, self._operator if operator else self._bearer)

    async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> Response:
        parts = path.split("?")[0].split("/")
        if len(parts) == 4 and parts[1] == "rpc" and method == "POST":
            return await self._by_slot(parts[2], parts[3], method, path, headers, body, False)
        if len(parts) == 4 and parts[1:3] == ["admin", "deliveries"] and method == "GET":
            return await self._by_slot("identity_mailbox", parts[3], method, path, headers,
                                       body, True)
        if parts[1:] == ["cluster"]:
            if method not in ("GET", "HEAD"):
                return error_response(ErrorCode.METHOD_NOT_ALLOWED, "use GET on this endpoint")
            if not self._authorised(headers):
                return await self.front(method, path, headers, body)  # its token answers
            return 200, _ENC.encode(self.machine.cluster_doc()), _JSON
        if parts[1:] == ["admin", "machine"] and method == "GET":
            if not self._authorised(headers, operator=True):
                return error_response(ErrorCode.UNAUTHENTICATED, "this endpoint needs the "
                                      "operator token")
            return 200, _ENC.encode(self.machine.status()), _JSON
        return await self.front(method, path, headers, body)

    async def _by_slot(self, namespace: str, object_id: str, method: str, path: str,
                       headers: Mapping[str, str], body: bytes, operator: bool) -> Response:
        machine = self.machine
        if not self._authorised(headers, operator):
            return await self.front(method, path, headers, body)  # the front's refusal
        if not machine.slot_count:  # not started: the slots are not known yet (never the front)
            return 200, _ENC.encode({"err": MailboxActorsError(
                ErrorCode.UNAVAILABLE, "this machine is starting").to_body()}), _JSON
        slot = machine.slot_for(namespace, object_id)
        host = machine.serving_host(slot)
        if host is not None:
            if operator:  # the deliveries page: the slot node's app reads it
                assert host.app is not None
                return await host.app(method, path, headers, body)
            assert host.node is not None  # the RPC itself: the token was checked above
            out = await host.node.router.call_bytes(namespace, object_id, body)
            self._metrics.inc("http_responses_total", _OK)
            return 200, out, _JSON
        if slot in machine.hosts:
            return 200, machine.unavailable(
                slot, "is not served here now (lease expired, draining or opening)"), _JSON
        if FORWARDED_HEADER in headers:
            # One hop at most: the sender's map was stale (CL-12); never open a copy here.
            return 200, machine.unavailable(slot, "is not held by this machine"), _JSON
        url = machine.holder_url(slot)
        if url is None:
            return 200, machine.unavailable(slot, "has no holder now"), _JSON
        fwd: dict[str, Any] = {"authorization": headers.get("authorization", "")}
        status, out = await machine.forward(url, method, path, fwd, body, slot)
        return status, out, _JSON
