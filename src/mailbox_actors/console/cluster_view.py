"""What the console reads and does, as plain dicts for its templates (UI-4): the cluster's nodes
over HTTP (their operator endpoints with the operator token, RPC with the cluster token), and its
control database (tenants, identities, domains, the event index), as the command line reads them.

It never opens an actor's file itself and never activates one to look at it: reads that an actor
answers (status, messages, events) are RPC calls, reads of evicted actors are the node's operator
endpoints. Every id a page hands in is checked here before it travels (``invalid_request``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import msgspec

from mailbox_actors.http.client import HttpPool
from mailbox_actors.node.shared_state import refuse_if_on_postgres
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.node_file import read_node_file
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.rpc.client import Client, RpcError
from mailbox_actors.wire.control import Domain, Identity, Tenant
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.inspection import (
    ActorDetail,
    ActorsPage,
    KvPage,
    NamespacesView,
    OutboxPage,
    RowsPage,
)

__all__ = ["ClusterView", "check_id"]

_OBJECT_ID = re.compile(r"^[0-9a-f]{64}$")
_RECORD_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_CURSOR = re.compile(r"^[A-Za-z0-9_.:=+/-]{1,1000}$")
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
_QUEUE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
T = TypeVar("T")
_MAILBOX = "identity_mailbox"
_MONITOR = "domain_monitor"
_TIMEOUT_S = 5.0
_EVENTS_WINDOW_MS = 60_000  # events/s is the event index's rate over the last minute
_EVENTS_SCAN = 20_000  # ... counted among its newest rows at most (no full scan per request)


def check_id(field: str, value: str, kind: str = "record") -> str:
    """``value`` as a page may hand it on, or ``invalid_request`` naming ``field``."""
    pattern = {"object": _OBJECT_ID, "record": _RECORD_ID, "cursor": _CURSOR,
               "namespace": _NAME, "queue": _QUEUE}[kind]
    if not isinstance(value, str) or pattern.match(value) is None:
        raise InvalidRequest(f"{field} is not a valid {kind} id", details={"field": field})
    return value


class ClusterView:
    """``async with ClusterView(data, nodes, cluster_token=..., operator_token=...) as view``."""

    def __init__(self, data: Path, nodes: list[tuple[str, str]], *, cluster_token: str,
                 operator_token: str, postgres: str | None = None) -> None:
        if postgres is None:
            refuse_if_on_postgres(data)  # before anything is made that would need closing
        self.data = data
        self.nodes = nodes
        self._operator = {"authorization": f"Bearer {operator_token}"}
        self._client = Client(nodes, cluster_token, request_timeout_s=_TIMEOUT_S, max_attempts=2)
        self._http = HttpPool(max_per_host=8)
        clock = SystemClock()
        self._clock = clock
        if postgres is None:
            self._db = ControlDb(data / "control.sqlite", clock=clock, ids=Ids(clock, SystemRng()))
        else:  # a cluster run with --postgres keeps its control data there (CL-7)
            from mailbox_actors.platform.control.postgres import control_on
            from mailbox_actors.platform.postgres.database import PgDatabase

            self._db = control_on(PgDatabase(postgres, setting="postgres", min_size=1, max_size=2),
                                  clock=clock, ids=Ids(clock, SystemRng()))

    @classmethod
    def from_data_dir(cls, data: Path, *, url: str | None, cluster_token: str,
                      operator_token: str, postgres: str | None = None) -> ClusterView:
        """The single node at ``url`` when given, else the cluster ``cluster.json`` in ``data``
        describes, else the ``serve`` node that recorded where it listens there (node.json)."""
        if url:
            nodes = [("node-0", url.rstrip("/"))]
        else:
            try:
                doc = json.loads((data / "cluster.json").read_text())
                nodes = [(str(n["name"]), str(n["url"])) for n in doc["nodes"]]
            except FileNotFoundError:
                nodes = [read_node_file(data) or ("node-0", "http://127.0.0.1:8787")]
        return cls(data, nodes, cluster_token=cluster_token, operator_token=operator_token,
                   postgres=postgres)

    async def __aenter__(self) -> ClusterView:
        await self._db.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()
        await self._http.aclose()
        await self._db.close()

    def now_ms(self) -> int:
        return self._clock.now_ms()

    # ---- the nodes' operator endpoints ---------------------------------------------------------

    async def _operator_get(self, url: str, path: str) -> Any:
        try:
            status, body = await self._http.request(url, "GET", path, self._operator, b"",
                                                    timeout_s=_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            raise MailboxActorsError(ErrorCode.UNAVAILABLE, "the node cannot be reached now",
                                     details={"url": url, "reason": type(e).__name__}) from None
        doc = msgspec.json.decode(body)
        if status != 200 or not isinstance(doc, dict) or "err" in doc:
            raise _node_error(status, doc)
        return doc

    async def node_statuses(self) -> list[dict[str, Any]]:
        """Each node's ``/admin/status``, or what kept it from answering."""
        out = []
        for name, url in self.nodes:
            try:
                s = await self._operator_get(url, "/admin/status")
                s.setdefault("node", name)
                s["url"], s["reachable"] = url, True
            except MailboxActorsError as e:
                s = {"node": name, "url": url, "reachable": False, "error": e.message,
                     "status": "unreachable"}
            out.append(s)
        return out

    # ---- operator inspection (UI-1): any node answers for the cluster -------------------------

    async def _inspect(self, path: str, params: Mapping[str, Any], t: type[T]) -> T:
        query = urlencode({k: v for k, v in params.items() if v is not None})
        last: MailboxActorsError | None = None
        for _, url in self.nodes:
            try:
                body = await self._operator_get(url, path + (f"?{query}" if query else ""))
            except MailboxActorsError as e:
                if e.code is not ErrorCode.UNAVAILABLE:
                    raise
                last = e
                continue
            return msgspec.convert(body, t)
        assert last is not None
        raise last

    async def namespaces(self) -> NamespacesView:
        return await self._inspect("/admin/inspect", {}, NamespacesView)

    async def actors(self, namespace: str, cursor: str | None, limit: int = 50) -> ActorsPage:
        check_id("namespace", namespace, "namespace")
        if cursor is not None:
            check_id("cursor", cursor, "cursor")
        return await self._inspect(f"/admin/actors/{namespace}",
                                   {"cursor": cursor, "limit": limit}, ActorsPage)

    async def actor(self, namespace: str, object_id: str) -> ActorDetail:
        check_id("namespace", namespace, "namespace")
        check_id("object_id", object_id, "object")
        return await self._inspect(f"/admin/actors/{namespace}/{object_id}", {}, ActorDetail)

    async def rows(self, namespace: str, object_id: str, table: str, cursor: str | None, *,
                   content: bool) -> RowsPage:
        check_id("namespace", namespace, "namespace")
        check_id("object_id", object_id, "object")
        check_id("table", table, "namespace")
        if cursor is not None:
            check_id("cursor", cursor, "cursor")
        return await self._content_or_not(f"/admin/actors/{namespace}/{object_id}/rows/{table}",
                                          {"cursor": cursor, "limit": 50}, content, RowsPage)

    async def kv(self, namespace: str, object_id: str, *, content: bool) -> KvPage:
        return await self._content_or_not(f"/admin/actors/{namespace}/{object_id}/kv",
                                          {"limit": 50}, content, KvPage)

    async def _content_or_not(self, path: str, params: dict[str, Any], content: bool,
                              t: type[T]) -> T:
        """With content when asked and the nodes show it (they do in dev mode only); a cluster
        not in dev mode answers permission_denied, and the page is read without it."""
        if content:
            try:
                return await self._inspect(path, params | {"content": 1}, t)
            except MailboxActorsError as e:
                if e.code is not ErrorCode.PERMISSION_DENIED:
                    raise
        return await self._inspect(path, params, t)

    async def outbox(self, namespace: str, object_id: str) -> OutboxPage:
        return await self._inspect(f"/admin/actors/{namespace}/{object_id}/outbox",
                                   {"limit": 25}, OutboxPage)

    async def dead_letters(self, queue: str, cursor: str | None) -> dict[str, Any]:
        """A page of ``queue``'s dead letters (UI-3): where from, why, after how many attempts."""
        check_id("queue", queue, "queue")
        if cursor is not None:
            check_id("cursor", cursor, "cursor")
        return await self._inspect(f"/admin/queues/{queue}/dead-letters",
                                   {"cursor": cursor, "limit": 50}, dict[str, Any])

    async def redrive(self, queue: str, message_id: str) -> dict[str, Any]:
        """Send one dead letter back to the queue it came from (UI-3)."""
        check_id("queue", queue, "queue")
        check_id("message_id", message_id)
        body = msgspec.json.encode({"message_ids": [message_id]})
        headers = {**self._operator, "content-type": "application/json"}
        last: MailboxActorsError | None = None
        for _, url in self.nodes:
            try:
                status, out = await self._http.request(
                    url, "POST", f"/admin/queues/{queue}/redrive", headers, body,
                    timeout_s=_TIMEOUT_S)
            except (OSError, TimeoutError) as e:
                last = MailboxActorsError(ErrorCode.UNAVAILABLE, "the node cannot be reached now",
                                          details={"url": url, "reason": type(e).__name__})
                continue
            doc = msgspec.json.decode(out)
            if status != 200 or not isinstance(doc, dict) or "err" in doc:
                raise _node_error(status, doc)
            return doc
        assert last is not None
        raise last

    async def identity_of_mailbox(self, mailbox_id: str) -> str | None:
        row = await self._db.fetch_one("SELECT id FROM identities WHERE mailbox_id = ?",
                                       (mailbox_id,))
        return None if row is None else str(row[0])

    async def object_events(self, object_id: str, limit: int = 25) -> list[dict[str, Any]]:
        """The newest indexed events of one actor (ids, types, times), newest first."""
        rows = await self._db.fetch_all(
            "SELECT seq, event_id, sequence, type, occurred_at_ms FROM (SELECT * FROM event_index "
            "ORDER BY seq DESC LIMIT ?) AS newest WHERE object_id = ? ORDER BY seq DESC LIMIT ?",
            (_EVENTS_SCAN, object_id, limit))
        keys = ("seq", "event_id", "sequence", "type", "occurred_at_ms")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    # ---- the control database ------------------------------------------------------------------

    async def cursor(self) -> int:
        """The event index's newest position: a page refreshes when it moves."""
        row = await self._db.fetch_one("SELECT coalesce(max(seq), 0) FROM event_index")
        return int(row[0]) if row else 0

    async def events_per_s(self) -> float:
        """Events indexed in the last minute, per second (counted among the newest rows only)."""
        since = self.now_ms() - _EVENTS_WINDOW_MS
        row = await self._db.fetch_one(
            "SELECT count(*) FROM (SELECT occurred_at_ms FROM event_index ORDER BY seq DESC "
            "LIMIT ?) AS newest WHERE occurred_at_ms >= ?", (_EVENTS_SCAN, since))
        return (int(row[0]) if row else 0) / (_EVENTS_WINDOW_MS / 1000)

    async def counts(self) -> dict[str, int]:
        """Tenants, identities and domains (small tables); the event index is not counted (a
        count reads the whole table), its position is the cursor."""
        row = await self._db.fetch_one(
            "SELECT (SELECT count(*) FROM tenants), (SELECT count(*) FROM identities), "
            "(SELECT count(*) FROM domains)")
        assert row is not None
        return dict(zip(("tenants", "identities", "domains"), map(int, row), strict=True))

    async def tenants(self) -> list[Tenant]:
        return await self._db.list_tenants()

    async def identities(self) -> list[tuple[Tenant, Identity]]:
        out = []
        for t in await self._db.list_tenants():
            out += [(t, i) for i in await self._db.list_identities(t.id)]
        return out

    async def domains(self) -> list[tuple[Tenant, Domain]]:
        out = []
        for t in await self._db.list_tenants():
            out += [(t, d) for d in await self._db.list_domains(t.id)]
        return out

    async def identity(self, identity_id: str) -> tuple[Tenant, Identity]:
        check_id("identity_id", identity_id)
        ident = await self._db.get_identity(identity_id)
        tenant = None if ident is None else await self._db.get_tenant(ident.tenant_id)
        if ident is None or tenant is None:
            raise MailboxActorsError(ErrorCode.IDENTITY_NOT_FOUND, "no such identity",
                                     details={"identity_id": identity_id})
        return tenant, ident

    async def domain(self, domain_id: str) -> tuple[Tenant, Domain]:
        check_id("domain_id", domain_id)
        dom = await self._db.get_domain(domain_id)
        tenant = None if dom is None else await self._db.get_tenant(dom.tenant_id)
        if dom is None or tenant is None:
            raise MailboxActorsError(ErrorCode.DOMAIN_NOT_FOUND, "no such domain",
                                     details={"domain_id": domain_id})
        return tenant, dom

    async def addresses(self, identity_id: str) -> list[str]:
        rows = await self._db.fetch_all(
            "SELECT address FROM addresses WHERE identity_id = ? ORDER BY address LIMIT 100",
            (identity_id,))
        return [str(r[0]) for r in rows]

    async def recent_events(self, *, identity_id: str | None = None,
                            limit: int = 20) -> list[dict[str, Any]]:
        """The newest indexed events (ids, types, times: never content), newest first."""
        where, args = ("WHERE identity_id = ?", (identity_id,)) if identity_id else ("", ())
        rows = await self._db.fetch_all(
            f"SELECT seq, event_id, tenant_id, identity_id, namespace, object_id, sequence, type, "
            f"occurred_at_ms FROM event_index {where} ORDER BY seq DESC LIMIT ?", (*args, limit))
        keys = ("seq", "event_id", "tenant_id", "identity_id", "namespace", "object_id",
                "sequence", "type", "occurred_at_ms")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    # ---- an IdentityMailbox --------------------------------------------------------------------

    async def mailbox_call(self, tenant: Tenant, ident: Identity, req: Mapping[str, Any]) -> Any:
        try:
            return await self._client.call(_MAILBOX, ident.mailbox_id, dict(req),
                                           tenant_id=tenant.id, identity_id=ident.id)
        except RpcError as e:
            raise MailboxActorsError(e.code, e.message, details=e.details) from None

    async def deliveries(self, ident: Identity, after: str | None) -> dict[str, Any]:
        """CA-10's page of the mailbox's delivery records, read without activating it."""
        query = urlencode({"limit": 32} | ({"after": check_id("after", after, "cursor")}
                                           if after else {}))
        url = self._client.owner_url(_MAILBOX, ident.mailbox_id)
        page: dict[str, Any] = await self._operator_get(
            url, f"/admin/deliveries/{quote(ident.mailbox_id)}?{query}")
        return page

    # ---- any actor, as its owner (Post's producer ops, PO-6) ----------------------------------

    async def owner_call(self, namespace: str, object_id: str, meta: Mapping[str, Any],
                         req: Mapping[str, Any]) -> Any:
        """Call the actor with the owner its file records (``owner_tenant``, ``owner_identity``),
        as the operator acting for it."""
        check_id("namespace", namespace, "namespace")
        check_id("object_id", object_id, "object")
        try:
            return await self._client.call(namespace, object_id, dict(req),
                                           tenant_id=meta.get("owner_tenant"),
                                           identity_id=meta.get("owner_identity"))
        except RpcError as e:
            raise MailboxActorsError(e.code, e.message, details=e.details) from None

    # ---- a DomainMonitor -----------------------------------------------------------------------

    async def monitor_call(self, tenant: Tenant, dom: Domain, op: str) -> Any:
        try:
            return await self._client.call(_MONITOR, dom.monitor_id, {"op": op},
                                           tenant_id=tenant.id)
        except RpcError as e:
            raise MailboxActorsError(e.code, e.message, details=e.details) from None


def _node_error(status: int, doc: Any) -> MailboxActorsError:
    """A node's ``{"err": ...}`` answer as the error it names (its code kept)."""
    err = doc.get("err", {}) if isinstance(doc, dict) else {}
    code = err.get("code", "unavailable") if isinstance(err, dict) else "unavailable"
    return MailboxActorsError(ErrorCode(code) if code in ErrorCode.__members__.values()
                              else ErrorCode.UPSTREAM_ERROR,
                              str(err.get("message", f"the node answered {status}")),
                              details=err.get("details"))


def ms_ago(now_ms: int, at_ms: int | None) -> str:
    """``at_ms`` as "12 s ago" / "in 3 min" for a table cell."""
    if at_ms is None:
        return "-"
    d = (now_ms - at_ms) / 1000
    word, d = ("ago", d) if d >= 0 else ("from now", -d)
    if d < 90:
        return f"{d:.0f} s {word}"
    if d < 5400:
        return f"{d / 60:.0f} min {word}"
    if d < 172_800:
        return f"{d / 3600:.0f} h {word}"
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(at_ms / 1000)) + " UTC"
