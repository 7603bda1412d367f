"""Where an object lives in a cluster and the one hop to its owner (CL-2, RPC-9, OPS-6).

Every node of a cluster knows the same ordered list of node names; an object id belongs to the node
rendezvous hashing picks (``core.placement``). A request for an id owned elsewhere, whether it came
over HTTP or from an actor on this node, goes to the owner in one hop, marked as forwarded, and
waits at most until its envelope's deadline. The node builds its ``Forwarding`` from the ``Peers``
it is given, before anything can call, and hands it to the router (actor-to-actor calls) and to the
HTTP app (requests from outside): nothing is wired to it afterwards.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec

from mailbox_actors.core.placement import owner_index
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["FORWARDED_HEADER", "FORWARD_MAX_S", "Forward", "Forwarding", "Peers"]

FORWARDED_HEADER = "x-mailbox-actors-forwarded"
FORWARD_MAX_S = 30.0  # a forwarded request without a deadline waits this long at most
# (owner index, method, path, headers, body, timeout in seconds) -> (status, body)
Forward = Callable[[int, str, str, Mapping[str, str], bytes, float],
                   Awaitable[tuple[int, bytes]]]
Plain = tuple[int, bytes, str]

_JSON = "application/json"
_ENC = msgspec.json.Encoder()


class _Deadline(msgspec.Struct):
    """The one envelope field forwarding reads; the owner decodes and checks the rest."""

    deadline_ms: int | None = None


_DEADLINE = msgspec.json.Decoder(_Deadline)


class Peers:
    """A cluster as one of its nodes sees it: the node names in cluster order, this node's index
    among them, how to send a request to another node, and the cluster token that the calls its
    actors make to other nodes carry."""

    __slots__ = ("cluster_token", "forward", "names", "self_index")

    def __init__(self, names: Sequence[str], self_index: int, forward: Forward | None, *,
                 cluster_token: str) -> None:
        if names and not 0 <= self_index < len(names):
            raise ValueError(f"self_index {self_index} is not an index of the {len(names)} peers")
        self.names = tuple(names)
        self.self_index = self_index
        self.forward = forward
        self.cluster_token = cluster_token


def _answer(code: ErrorCode, message: str, details: dict[str, Any] | None = None) -> Plain:
    """An error the caller's envelope gets back as if its owner had answered it (HTTP 200)."""
    body = MailboxActorsError(code, message, details=details).to_body()
    return 200, _ENC.encode({"err": body}), _JSON


class Forwarding:
    """The owner of each id, and the hop to it. Without peers every id is this node's."""

    def __init__(self, peers: Peers | None, *, now_ms: Callable[[], int], metrics: Any,
                 log: Any) -> None:
        self.peers: list[str] = list(peers.names) if peers is not None else []
        self.self_index = peers.self_index if peers is not None else 0
        self._forward = peers.forward if peers is not None else None
        self._bearer = f"Bearer {peers.cluster_token}" if peers is not None else ""
        self._now_ms = now_ms
        self._metrics = metrics
        self._log = log
        metrics.describe("rpc_forwarded_total", "RPCs forwarded to the owning node", "counter")

    def owner(self, namespace: str, object_id: str) -> int:
        """The index of the node that owns the id."""
        if len(self.peers) <= 1:
            return self.self_index
        return owner_index(self.peers, namespace, object_id)

    # ---- the router's placement: actor-to-actor calls (RPC-9) ------------------------------

    def elsewhere(self, namespace: str, object_id: str) -> int | None:
        """The owner's index when another node owns the id; None when it lives here."""
        if len(self.peers) <= 1:
            return None  # a single node: the in-process call path pays one length check
        owner = owner_index(self.peers, namespace, object_id)
        if owner == self.self_index or not 0 <= owner < len(self.peers):
            return None
        return owner

    async def send(self, owner: int, namespace: str, object_id: str, body: bytes) -> bytes:
        """An envelope from an actor on this node to the node that owns ``object_id``; the
        owner's reply bytes, or an ``unavailable`` reply when it answered other than 200."""
        status, out, _ = await self.forward_to(owner, f"/rpc/{namespace}/{object_id}",
                                               {"authorization": self._bearer}, body)
        if status != 200:
            return _ENC.encode({"err": MailboxActorsError(
                ErrorCode.UNAVAILABLE, f"the owning node answered HTTP {status}").to_body()})
        return out

    # ---- the hop ---------------------------------------------------------------------------

    async def forward_to(self, owner: int, path: str, headers: Mapping[str, str],
                         body: bytes, method: str = "POST") -> Plain:
        """Send a request to node ``owner``, marked as forwarded, with the caller's token; waits
        until the envelope's deadline at most (OPS-6)."""
        if self._forward is None:
            body_ = MailboxActorsError(ErrorCode.UNAVAILABLE,
                                       "the owning node is not reachable").to_body()
            return ErrorCode.UNAVAILABLE.http_status, _ENC.encode({"err": body_}), _JSON
        fwd = {"authorization": headers.get("authorization", ""), FORWARDED_HEADER: "1",
               "content-type": _JSON}
        self._metrics.inc("rpc_forwarded_total")
        timeout_s = self._timeout_s(body)
        if timeout_s <= 0:
            return _answer(ErrorCode.TIMEOUT,
                           "the request's deadline passed before it reached its node")
        try:
            status, out = await self._forward(owner, method, path, fwd, body, timeout_s)
        except (OSError, ConnectionError, TimeoutError) as e:
            self._log.warning("forward_failed", owner=self.peers[owner], error=type(e).__name__)
            if isinstance(e, TimeoutError) and timeout_s < FORWARD_MAX_S:
                # OPS-6: the owner did not answer within the caller's deadline (stopped, wedged).
                return _answer(ErrorCode.TIMEOUT, f"the owning node {self.peers[owner]} did not "
                               "answer within the request's deadline")
            return _answer(ErrorCode.UNAVAILABLE,
                           f"the owning node {self.peers[owner]} cannot be reached now")
        return status, out, _JSON

    def _timeout_s(self, body: bytes) -> float:
        """How long a forwarded request may wait for its owner: until the envelope's deadline
        (OPS-6), at most FORWARD_MAX_S; a body that is not an envelope gets the maximum (its owner
        answers it invalid_request at once)."""
        try:
            deadline = _DEADLINE.decode(body).deadline_ms if body else None
        except (msgspec.DecodeError, RecursionError):  # nested past msgspec's depth: the owner
            deadline = None                             # answers it invalid_request at once
        if deadline is None:
            return FORWARD_MAX_S
        return min(FORWARD_MAX_S, (deadline - self._now_ms()) / 1000)
