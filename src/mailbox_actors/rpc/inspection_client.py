"""Operator inspection over the network (UI-1): the calls of ``node.inspection.Inspector``, answered
by a cluster's nodes under the operator token (``/admin/inspect``, ``/admin/actors/...``).

Any node answers for the whole cluster (it asks the others; queues and the event index are shared),
so a request goes to the first node that can be reached; an unreachable one is skipped. Answers
decode to the same ``wire.inspection`` types as in process; an error body is raised as
``RpcError`` with its code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import msgspec

from mailbox_actors.http.client import HttpPool
from mailbox_actors.platform.locks import lock_holder
from mailbox_actors.platform.node_file import read_node_file
from mailbox_actors.rpc.client import RpcError
from mailbox_actors.rpc.tokens import read_token
from mailbox_actors.wire.errors import ErrorBody, ErrorCode
from mailbox_actors.wire.inspection import (
    ActorDetail,
    ActorsPage,
    DeadLettersPage,
    EventsPage,
    KvPage,
    NamespacesView,
    OutboxPage,
    Redrive,
    RedriveReply,
    RowsPage,
)

__all__ = ["InspectionClient", "cluster_urls"]

T = TypeVar("T")
_ERR = msgspec.json.Decoder(dict[str, ErrorBody])
_DEFAULT_URL = "http://127.0.0.1:8787"


def cluster_urls(data_dir: str | Path, url: str | None = None) -> list[str]:
    """The node URLs of the cluster (or single node) on ``data_dir``: ``url`` when given, else
    cluster.json's, else the one a single ``serve`` node recorded (``platform.node_file``).
    Raises ``RpcError`` unavailable when nothing runs there."""
    if url:
        return [url.rstrip("/")]
    d = Path(data_dir)
    try:
        doc = json.loads((d / "cluster.json").read_text())
        return [str(n["url"]) for n in doc["nodes"]]
    except FileNotFoundError:
        pass
    recorded = read_node_file(d)
    if recorded is not None:
        return [recorded[1]]
    if lock_holder(d) is None:
        raise RpcError(ErrorCode.UNAVAILABLE, f"no cluster is running on {d} (start one with "
                       f"'mailbox-actors cluster --data {d}', or pass --url for a node "
                       "elsewhere)", details={"data": str(d)})
    return [_DEFAULT_URL]


class InspectionClient:
    """``async with InspectionClient(urls, operator_token) as c: await c.list_actors(...)``."""

    def __init__(self, urls: Sequence[str] | str, operator_token: str, *,
                 timeout_s: float = 30.0) -> None:
        self.urls = [urls] if isinstance(urls, str) else [u.rstrip("/") for u in urls]
        if not self.urls:
            raise ValueError("the node list is empty")
        self._auth = {"authorization": f"Bearer {operator_token}"}
        self._timeout = timeout_s
        self._pool = HttpPool()

    @classmethod
    def from_data_dir(cls, data_dir: str | Path, url: str | None = None,
                      **kw: Any) -> InspectionClient:
        """The cluster on ``data_dir``, with the operator token ``read_token`` finds (raises
        FileNotFoundError when there is none)."""
        return cls(cluster_urls(data_dir, url), read_token(data_dir, "operator"), **kw)

    async def __aenter__(self) -> InspectionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def get(self, path: str, params: dict[str, Any] | None = None, *,
                  method: str = "GET", body: bytes = b"") -> bytes:
        """GET ``path`` from the first node that answers; the 200 body, else ``RpcError``. A POST
        (``method``) is not sent again to another node once one may have received it."""
        query = {k: v for k, v in (params or {}).items() if v is not None and v is not False}
        full = path + ("?" + urlencode({k: (1 if v is True else v) for k, v in query.items()})
                       if query else "")
        last: RpcError | None = None
        for url in self.urls:
            try:
                status, out = await self._pool.request(url, method, full, self._auth, body,
                                                       timeout_s=self._timeout)
            except (OSError, ConnectionError, TimeoutError) as e:
                last = RpcError(ErrorCode.UNAVAILABLE, f"node {url} cannot be reached "
                                f"({type(e).__name__})", details={"url": url})
                if method != "GET" and not isinstance(e, ConnectionRefusedError):
                    raise last from None  # it may have been received: not sent twice
                continue
            if status == 200:
                return out
            try:
                err = _ERR.decode(out)["err"]
            except (msgspec.DecodeError, KeyError):
                raise RpcError(ErrorCode.INTERNAL_ERROR, f"node {url} answered HTTP {status} "
                               "without an error body") from None
            raise RpcError(err.code, err.message, details=err.details, fix=err.fix,
                           request_id=err.request_id)
        assert last is not None
        raise last

    async def _typed(self, t: type[T], path: str, **params: Any) -> T:
        return msgspec.json.decode(await self.get(path, params), type=t)

    async def overview(self) -> NamespacesView:
        return await self._typed(NamespacesView, "/admin/inspect")

    async def list_actors(self, namespace: str, *, cursor: str | None = None,
                          limit: int | None = None) -> ActorsPage:
        return await self._typed(ActorsPage, f"/admin/actors/{_seg(namespace)}", cursor=cursor,
                                 limit=limit)

    async def show_actor(self, namespace: str, object_id: str) -> ActorDetail:
        return await self._typed(ActorDetail, f"/admin/actors/{_seg(namespace)}/{_seg(object_id)}")

    async def rows(self, namespace: str, object_id: str, table: str, *, cursor: str | None = None,
                   limit: int | None = None, content: bool = False) -> RowsPage:
        return await self._typed(
            RowsPage, f"/admin/actors/{_seg(namespace)}/{_seg(object_id)}/rows/{_seg(table)}",
            cursor=cursor, limit=limit, content=content)

    async def kv(self, namespace: str, object_id: str, *, cursor: str | None = None,
                 limit: int | None = None, content: bool = False) -> KvPage:
        return await self._typed(KvPage, f"/admin/actors/{_seg(namespace)}/{_seg(object_id)}/kv",
                                 cursor=cursor, limit=limit, content=content)

    async def outbox(self, namespace: str, object_id: str, *, cursor: str | None = None,
                     limit: int | None = None) -> OutboxPage:
        return await self._typed(
            OutboxPage, f"/admin/actors/{_seg(namespace)}/{_seg(object_id)}/outbox",
            cursor=cursor, limit=limit)


    async def dead_letters(self, queue: str, *, cursor: str | None = None,
                           limit: int | None = None) -> DeadLettersPage:
        return await self._typed(DeadLettersPage, f"/admin/queues/{_seg(queue)}/dead-letters",
                                 cursor=cursor, limit=limit)

    async def redrive(self, queue: str, message_ids: list[str] | None = None, *,
                      limit: int = 100) -> RedriveReply:
        body = msgspec.json.encode(Redrive(message_ids=message_ids, limit=limit))
        return msgspec.json.decode(await self.get(f"/admin/queues/{_seg(queue)}/redrive",
                                                  method="POST", body=body), type=RedriveReply)

    async def events(self, tenant: str, *, cursor: str | None = None,
                     limit: int | None = None) -> EventsPage:
        return await self._typed(EventsPage, "/admin/events", tenant=tenant, cursor=cursor,
                                 limit=limit)


def _seg(text: str) -> str:
    return quote(text, safe="")
