"""Operator inspection over HTTP (UI-1), under the operator token (``node.app`` checked it):

- ``GET /admin/inspect``: every namespace's counts, summed over the cluster's nodes
- ``GET /admin/actors/{namespace}?cursor=&limit=``: a page of actors, merged across the nodes
- ``GET /admin/actors/{namespace}/{id}``: one actor (answered by its owning node)
- ``GET /admin/actors/{namespace}/{id}/rows/{table}?cursor=&limit=&content=``
- ``GET /admin/actors/{namespace}/{id}/kv?cursor=&limit=&content=``
- ``GET /admin/actors/{namespace}/{id}/outbox?cursor=&limit=``
- ``GET /admin/actors/identity_mailbox/{id}/messages/{message_id}/raw?chunk=`` and
  ``.../attachments/{part}?chunk=``: a message's source, an attachment (UI-2; dev mode only)
- ``GET /admin/queues/{queue}/dead-letters?cursor=&limit=`` and ``POST .../redrive`` (UI-3)
- ``GET /admin/events?tenant=&cursor=&limit=``: a tenant's indexed events (UI-3, ``events tail``)

A request another node forwarded (``FORWARDED_HEADER``) is answered for this node alone, so a
listing asks each node once. ``content=1`` is refused unless the node was started to show content
(dev mode on loopback, UI-4); otherwise text that is not an id, state or code is described, not shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, quote, unquote

import anyio
import msgspec

from mailbox_actors.core.cursors import CursorCodec
from mailbox_actors.node.forwarding import FORWARDED_HEADER, Forwarding
from mailbox_actors.node.inspection import Inspector, check_limit
from mailbox_actors.node.queue_inspection import QueueInspector
from mailbox_actors.objects.identity_mailbox.sources import (
    file_rows,
    get_attachment,
    get_raw_message,
    has_inline,
)
from mailbox_actors.platform.storage.readonly import read_only, table_exists
from mailbox_actors.wire.errors import (
    ErrorBody,
    ErrorCode,
    InvalidRequest,
    MailboxActorsError,
    UnknownPath,
)
from mailbox_actors.wire.inspection import ActorsPage, NamespaceCount, NamespacesView, Redrive
from mailbox_actors.wire.sources import GetAttachment, GetRawMessage

__all__ = ["InspectionRoutes"]

Plain = tuple[int, bytes, str]
_JSON = "application/json"
_ENC = msgspec.json.Encoder()
_PAGE = msgspec.json.Decoder(ActorsPage)
_VIEW = msgspec.json.Decoder(NamespacesView)
_ERR = msgspec.json.Decoder(dict[str, ErrorBody])
_REDRIVE = msgspec.json.Decoder(Redrive)
_QUERY_MAX = 4096


def _query(query: str, allowed: frozenset[str]) -> dict[str, str]:
    if len(query) > _QUERY_MAX:
        raise InvalidRequest("the query string is too long", details={"field": "query"})
    try:
        args = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query),
                        max_num_fields=16)
    except ValueError:
        raise InvalidRequest("the query string is malformed", details={"field": "query"}) from None
    for k, v in args.items():
        if k not in allowed:
            raise InvalidRequest(f"unknown parameter {k[:32]!r}", details={
                "field": k[:32], "allowed": sorted(allowed)})
        if len(v) != 1:
            raise InvalidRequest(f"{k} is given twice", details={"field": k})
    return {k: v[0] for k, v in args.items()}


def _limit(args: Mapping[str, str]) -> int:
    text = args.get("limit")
    if text is None or text == "":
        return check_limit(None)
    if not text.isdigit() or len(text) > 6:
        raise InvalidRequest("limit must be an integer", details={"field": "limit"})
    return check_limit(int(text))


def _flag(args: Mapping[str, str], name: str) -> bool:
    value = args.get(name, "0")
    if value not in ("0", "1", "true", "false", ""):
        raise InvalidRequest(f"{name} must be 1 or 0", details={"field": name})
    return value in ("1", "true")


class InspectionRoutes:
    """Answers the inspection endpoints of one node (see the module doc)."""

    def __init__(self, inspector: Inspector, queues: QueueInspector, forwarding: Forwarding, *,
                 content_allowed: bool = False) -> None:
        self.inspector = inspector
        self.queues = queues
        self._fwd = forwarding
        self.content_allowed = content_allowed

    @staticmethod
    def method_for(parts: list[str]) -> str:
        """The one method ``parts``' endpoint takes (POST for a redrive, else GET)."""
        return "POST" if len(parts) == 5 and parts[2] == "queues" and parts[4] == "redrive" \
            else "GET"

    def _content(self, args: Mapping[str, str]) -> bool:
        wanted = _flag(args, "content")
        if wanted and not self.content_allowed:
            raise MailboxActorsError(
                ErrorCode.PERMISSION_DENIED, "content is shown only in dev mode on loopback",
                details={"field": "content"},
                fix="Leave content out: ids, states, counts and sizes are shown.")
        return wanted

    async def answer(self, parts: list[str], query: str, headers: Mapping[str, str],
                     body: bytes = b"") -> Plain:
        """``parts``: the path split on '/', starting ``['', 'admin', ...]``."""
        local = FORWARDED_HEADER in headers
        if parts[2] == "inspect" and len(parts) == 3:
            _query(query, frozenset())
            return _ok(await self._overview(local, headers))
        if parts[2] == "events" and len(parts) == 3:
            args = _query(query, frozenset({"tenant", "cursor", "limit"}))
            if not args.get("tenant"):
                raise InvalidRequest("tenant is required (its id or name)",
                                     details={"field": "tenant"})
            return _ok(await self.queues.events(args["tenant"], cursor=args.get("cursor"),
                                                limit=_limit(args)))
        if parts[2] == "queues" and len(parts) == 5 and parts[4] == "dead-letters":
            args = _query(query, frozenset({"cursor", "limit"}))
            return _ok(await self.queues.dead_letters(unquote(parts[3]), cursor=args.get("cursor"),
                                                      limit=_limit(args)))
        if parts[2] == "queues" and len(parts) == 5 and parts[4] == "redrive":
            _query(query, frozenset())
            try:
                req = _REDRIVE.decode(body or b"{}")
            except msgspec.DecodeError as e:
                raise InvalidRequest(f"the body is not a redrive request: {e}",
                                     details={"field": "body"}) from None
            return _ok(await self.queues.redrive(unquote(parts[3]), req.message_ids,
                                                 limit=req.limit))
        if parts[2] != "actors" or len(parts) < 4:
            raise _no_endpoint()
        ns = unquote(parts[3])
        if len(parts) == 4:
            args = _query(query, frozenset({"cursor", "limit"}))
            return _ok(await self._actors(ns, args, local, headers, query))
        oid = parts[4]
        owner = self._fwd.owner(ns, oid) if self.inspector.knows(ns) else self._fwd.self_index
        if owner != self._fwd.self_index and not local:
            path = "/".join(parts) + (f"?{query}" if query else "")
            status, body, ctype = await self._fwd.forward_to(owner, path, headers, b"",
                                                             method="GET")
            return status, body, ctype
        insp = self.inspector
        if len(parts) == 5:
            _query(query, frozenset())
            return _ok(await insp.show_actor(ns, oid))
        if len(parts) == 7 and parts[5] == "rows":
            args = _query(query, frozenset({"cursor", "limit", "content"}))
            return _ok(await insp.rows(ns, oid, unquote(parts[6]), cursor=args.get("cursor"),
                                       limit=_limit(args), content=self._content(args)))
        if len(parts) == 6 and parts[5] == "kv":
            args = _query(query, frozenset({"cursor", "limit", "content"}))
            return _ok(await insp.kv(ns, oid, cursor=args.get("cursor"), limit=_limit(args),
                                     content=self._content(args)))
        if len(parts) == 6 and parts[5] == "outbox":
            args = _query(query, frozenset({"cursor", "limit"}))
            return _ok(await insp.outbox(ns, oid, cursor=args.get("cursor"), limit=_limit(args)))
        if ns == "identity_mailbox" and len(parts) in (8, 9) and parts[5] == "messages":
            return _ok(await self._mail_bytes(oid, parts[6:], query))
        raise _no_endpoint()

    async def _mail_bytes(self, oid: str, rest: list[str], query: str) -> Any:
        """UI-2's operator read of a message's raw source (``.../messages/{id}/raw``) or an
        attachment's content (``.../messages/{id}/attachments/{part}``), a chunk at a time, from
        the file read-only: content, so dev mode only."""
        args = _query(query, frozenset({"chunk"}))
        if not self.content_allowed:
            raise MailboxActorsError(ErrorCode.PERMISSION_DENIED,
                                     "a message's content is shown only in dev mode on loopback",
                                     fix="The owner reads it with get_raw_message or "
                                         "get_attachment (mailbox-actors messages raw).")
        text = args.get("chunk") or "0"
        if not text.isdigit() or len(text) > 6:
            raise InvalidRequest("chunk must be an integer", details={"field": "chunk"})
        try:
            req: GetRawMessage | GetAttachment | None = (  # convert: the bounds are checked
                msgspec.convert({"message_id": rest[0], "chunk": int(text)}, GetRawMessage)
                if rest[1:] == ["raw"] else msgspec.convert(
                    {"message_id": rest[0], "part": int(rest[2]), "chunk": int(text)},
                    GetAttachment) if rest[1] == "attachments" and rest[2].isdigit() else None)
            if req is None:
                raise ValueError(rest)
        except (IndexError, ValueError, msgspec.ValidationError):
            raise InvalidRequest("not a message's raw source or an attachment of it",
                                 details={"field": "path"}) from None
        path = self.inspector.path_of("identity_mailbox", oid)
        asked: GetRawMessage | GetAttachment = req

        def read() -> Any:
            with read_only(path) as conn:
                if conn is None:
                    raise MailboxActorsError(ErrorCode.IDENTITY_NOT_FOUND, "no such mailbox")
                rows = file_rows(conn)
                if not table_exists(conn, "raw_chunks"):
                    raise InvalidRequest("this mailbox's file is of an earlier layout",
                                         details={"field": "id"})
                return (get_raw_message(rows, asked, inline_column=has_inline(rows))
                        if isinstance(asked, GetRawMessage)
                        else get_attachment(rows, asked))
        found = await anyio.to_thread.run_sync(read)
        if found is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no such message in this mailbox",
                                     details={"field": "message_id"})
        return found

    async def _peers(self, path: str, headers: Mapping[str, str]) -> list[tuple[str, bytes]]:
        """Each other node's answer to ``path`` (forwarded: answered for itself alone)."""
        out: list[tuple[str, bytes]] = []

        async def ask(i: int) -> None:
            status, body, _ = await self._fwd.forward_to(i, path, headers, b"", method="GET")
            if status != 200:
                err = _ERR.decode(body).get("err") if body.startswith(b'{"err"') else None
                if err is not None and err.code != ErrorCode.UNAVAILABLE:
                    raise MailboxActorsError.from_body(err)
                raise MailboxActorsError(ErrorCode.UNAVAILABLE,
                                         f"node {self._fwd.peers[i]} cannot be reached now",
                                         details={"node": self._fwd.peers[i]})
            out.append((self._fwd.peers[i], body))

        async with anyio.create_task_group() as tg:
            for i in range(len(self._fwd.peers)):
                if i != self._fwd.self_index:
                    tg.start_soon(ask, i)
        return out

    async def _actors(self, ns: str, args: Mapping[str, str], local: bool,
                      headers: Mapping[str, str], query: str) -> ActorsPage:
        n = _limit(args)
        mine = await self.inspector.list_actors(ns, cursor=args.get("cursor"), limit=n)
        if local or len(self._fwd.peers) <= 1:
            return mine
        path = f"/admin/actors/{quote(ns, safe='')}" + (f"?{query}" if query else "")
        pages = [mine, *(_PAGE.decode(body) for _, body in await self._peers(path, headers))]
        return merge_pages(ns, pages, n, self.inspector.cursors)

    async def _overview(self, local: bool, headers: Mapping[str, str]) -> NamespacesView:
        mine = await self.inspector.overview()
        if local or len(self._fwd.peers) <= 1:
            return mine
        views = [mine, *(_VIEW.decode(body) for _, body in await self._peers("/admin/inspect",
                                                                             headers))]
        totals: dict[str, list[int]] = {}
        for v in views:
            for c in v.namespaces:
                t = totals.setdefault(c.namespace, [0, 0, 0, 0])
                for i, x in enumerate((c.actors, c.active, c.alarms_pending, c.alarms_overdue)):
                    t[i] += x
        return NamespacesView(
            namespaces=[NamespaceCount(namespace=ns, actors=t[0], active=t[1], alarms_pending=t[2],
                                       alarms_overdue=t[3]) for ns, t in sorted(totals.items())],
            nodes=[n for v in views for n in v.nodes])


def _no_endpoint() -> MailboxActorsError:
    return UnknownPath("no such inspection endpoint", endpoints=[
        "/admin/inspect", "/admin/actors/{namespace}", "/admin/actors/{namespace}/{id}",
        "/admin/actors/{namespace}/{id}/rows/{table}", "/admin/actors/{namespace}/{id}/kv",
        "/admin/actors/{namespace}/{id}/outbox", "/admin/queues/{queue}/dead-letters",
        "/admin/queues/{queue}/redrive", "/admin/events"])


def _ok(value: Any) -> Plain:
    return 200, _ENC.encode(value), _JSON


def merge_pages(namespace: str, pages: Iterable[ActorsPage], n: int, cursors: CursorCodec,
                ) -> ActorsPage:
    """The first ``n`` actors of several nodes' pages (each in id order, ids disjoint), with the
    cursor after them: more remain when a page was cut or a node had more."""
    pages = list(pages)
    merged = sorted((a for p in pages for a in p.actors), key=lambda a: a.id)
    page = merged[:n]
    more = len(merged) > n or any(p.next_cursor is not None for p in pages)
    nxt = cursors.make("actors", namespace, [page[-1].id]) if more and page else None
    return ActorsPage(namespace=namespace, actors=page, next_cursor=nxt)
