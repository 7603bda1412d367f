"""Operator inspection of one node's actors (UI-1): listings, one actor's runtime view, row pages,
KV and outbox, read from the actors' files without activating them.

Every read goes through a read-only connection (CA-10: ``platform.storage.readonly``): it never
activates an actor, runs no migration, arms no alarm and leaves the file's bytes as they were.
What only the node knows (active or not, the alarm's retries) comes from its memory. Pages are
bounded: a listing reads the shard directories from its cursor on, never the whole namespace;
counts are capped. Text and bytes are shown only with ``content=True`` (CA-10, UI-4): see
``node.actor_file_view``, which reads one actor's file. A cluster-wide listing merges the
nodes' pages (``node.inspection_http``); this module answers for one node.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections import Counter, OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from mailbox_actors.core.actor_ids import check_id
from mailbox_actors.core.cursors import CursorCodec
from mailbox_actors.node.actor_file_view import (
    as_int,
    kv_page,
    outbox_page,
    read_meta,
    rows_page,
    view_actor,
)
from mailbox_actors.wire.errors import InvalidRequest, MailboxActorsError
from mailbox_actors.wire.inspection import (
    ActorDetail,
    ActorsPage,
    ActorSummary,
    KvPage,
    NamespaceCount,
    NamespacesView,
    OutboxPage,
    RowsPage,
)

if TYPE_CHECKING:
    from mailbox_actors.node.node import Node

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "OVERDUE_AFTER_MS", "Inspector", "check_limit"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_NAMES_KEPT = 10_000
_ALARM_COUNTS_S = 1.0  # the overview's alarm counts are at most this old
OVERDUE_AFTER_MS = 1_000  # an alarm is overdue once it is this late (one armed for now is not)
_METAS_KEPT = 50_000  # listed actors' meta remembered (two short strings each)
_META_READERS = 4  # files a listing reads at once for the metas it does not remember
_ID_FILE = re.compile(r"[0-9a-f]{64}\.sqlite")
_SHARD = re.compile(r"[0-9a-f]{2}")
_NAMESPACE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_limit(limit: int | None, field: str = "limit") -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"{field} must be an integer 1..{MAX_LIMIT}", details={"field": field})
    return limit


class _Listed:
    """One listed file: its id, path, size, the signature its remembered meta holds for, the
    meta."""

    __slots__ = ("meta", "oid", "path", "signature", "size")

    def __init__(self, oid: str, path: Path, size: int, signature: tuple[int, int, int, int],
                 meta: dict[str, str] | None) -> None:
        self.oid = oid
        self.path = path
        self.size = size
        self.signature = signature
        self.meta = meta


class Inspector:
    """Reads this node's actors for an operator. Every method is safe on a live node."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._host = node.host
        self._book = node.alarm_book
        self._control = node.control_db
        self.node_name = node.settings.node_name
        self.cursors = CursorCodec(node.settings.id_secret)
        self._names: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._alarms_counted: tuple[float, Counter[str], Counter[str]] | None = None
        # (namespace, id) -> (its file's and log's sizes and mtimes, the meta a listing shows)
        self._metas: OrderedDict[tuple[str, str], tuple[tuple[int, int, int, int],
                                                        dict[str, str]]] = OrderedDict()
        # (namespace, shard) -> (the directory's mtime, its files) for the overview's counts
        self._shard_counts: dict[tuple[str, str], tuple[int, int]] = {}
        self._meta_readers: anyio.CapacityLimiter | None = None  # made on the loop, at first use

    # ---- checks ----------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        return sorted(self._host.paths.keys)

    def knows(self, namespace: str) -> bool:
        return namespace in self._host.paths.keys

    def _check_namespace(self, namespace: str) -> bytes:
        key = self._host.paths.keys.get(namespace) if isinstance(namespace, str) else None
        if key is None:
            shown = namespace[:64] if isinstance(namespace, str) and _NAMESPACE.fullmatch(
                namespace) else "?"
            raise InvalidRequest("unknown namespace", details={
                "field": "namespace", "namespace": shown, "known": self.namespaces()})
        return key

    def path_of(self, namespace: str, object_id: str) -> Path:
        self._check_namespace(namespace)
        if not isinstance(object_id, str) or check_id(self._host.paths.keys[namespace],
                                                      object_id) is not None:
            raise InvalidRequest("id is not an object id of this namespace",
                                 details={"field": "id"})
        return self._host.path_for(namespace, object_id)

    # ---- the overview ----------------------------------------------------------------------

    async def overview(self) -> NamespacesView:
        """Each namespace's actors on disk, active, and alarms pending and overdue. The alarm
        counts walk the node's book (one entry per pending alarm) at most once a second; the
        files are counted in a worker thread, each shard again only when it changed."""
        namespaces = self.namespaces()
        active = Counter(ns for ns, _ in self._host.active_keys())
        pending, overdue = self._alarm_counts()
        files = await anyio.to_thread.run_sync(
            lambda: {ns: self._file_count(ns) for ns in namespaces})
        return NamespacesView(nodes=[self.node_name], namespaces=[NamespaceCount(
            namespace=ns, actors=files[ns], active=active[ns], alarms_pending=pending[ns],
            alarms_overdue=overdue[ns]) for ns in namespaces])

    def _alarm_counts(self) -> tuple[Counter[str], Counter[str]]:
        now = time.monotonic()
        if self._alarms_counted is not None and now - self._alarms_counted[0] < _ALARM_COUNTS_S:
            return self._alarms_counted[1], self._alarms_counted[2]
        at_ms = self._node.clock.now_ms()
        pending: Counter[str] = Counter()
        overdue: Counter[str] = Counter()
        for (ns, _), e in self._book.entries.items():  # on the loop: nothing changes it meanwhile
            pending[ns] += 1
            if e.at <= at_ms - OVERDUE_AFTER_MS:  # late, not merely due this instant
                overdue[ns] += 1
        self._alarms_counted = (now, pending, overdue)
        return pending, overdue

    def _file_count(self, namespace: str) -> int:
        """Files of the namespace, each shard counted again only when its directory changed
        (its mtime): a stat of each shard per request, not a read of every name."""
        root = self._host.actors_dir / namespace
        total = 0
        try:
            shards = [e for e in os.scandir(root) if _SHARD.fullmatch(e.name) and e.is_dir()]
        except FileNotFoundError:
            return 0
        for e in shards:
            mtime = e.stat().st_mtime_ns
            known = self._shard_counts.get((namespace, e.name))
            if known is None or known[0] != mtime:
                with os.scandir(e.path) as it:
                    n = sum(1 for f in it if _ID_FILE.fullmatch(f.name))
                known = self._shard_counts[(namespace, e.name)] = (mtime, n)
            total += known[1]
        return total

    # ---- listing ---------------------------------------------------------------------------

    async def list_actors(self, namespace: str, *, cursor: str | None = None,
                          limit: int | None = None) -> ActorsPage:
        """This node's actors of ``namespace`` in id order, after ``cursor``."""
        self._check_namespace(namespace)
        n = check_limit(limit)
        position = self.cursors.read(cursor, "actors", namespace)
        after = self._after_id(position)
        listed = await anyio.to_thread.run_sync(self._listed, namespace, after, n + 1)
        page = listed[:n]
        await self._read_metas(namespace, page)
        summaries = [await self._named(self._summary(namespace, f)) for f in page]
        nxt = self.cursors.make("actors", namespace, [page[-1].oid]) if len(listed) > n else None
        return ActorsPage(namespace=namespace, actors=summaries, next_cursor=nxt)

    def _after_id(self, position: list[Any] | None) -> str | None:
        if position is None:
            return None
        if len(position) != 1 or not isinstance(position[0], str) or len(position[0]) != 64:
            raise InvalidRequest("cursor position is malformed", details={"field": "cursor"})
        return position[0]

    def list_ids_after(self, namespace: str, after: str | None, n: int,
                       ) -> list[tuple[str, int, int]]:
        """(id, file bytes, mtime ns) of up to ``n`` files of ``namespace`` after ``after``, in id
        order: the shard directories from ``after``'s on, each listed once (no full scan)."""
        key = self._host.paths.keys[namespace]
        root = self._host.actors_dir / namespace
        try:
            shards = sorted(s for s in os.listdir(root) if _SHARD.fullmatch(s))
        except FileNotFoundError:
            return []
        out: list[tuple[str, int, int]] = []
        for shard in shards:
            if after is not None and shard < after[:2]:
                continue
            try:
                with os.scandir(root / shard) as it:
                    entries = sorted((f.name[:64], f) for f in it if _ID_FILE.fullmatch(f.name)
                                     and (after is None or f.name[:64] > after))
            except FileNotFoundError:
                continue
            for oid, f in entries:
                if check_id(key, oid) is not None:
                    continue  # not one of this namespace's ids
                try:
                    st = f.stat()
                except FileNotFoundError:
                    continue  # removed meanwhile (erased)
                out.append((oid, st.st_size, st.st_mtime_ns))
                if len(out) >= n:
                    return out
        return out

    def _listed(self, namespace: str, after: str | None, n: int) -> list[_Listed]:
        """Up to ``n`` files of ``namespace`` after ``after`` (``list_ids_after``), each with the
        meta remembered for it when neither the file nor its log changed since it was read (two
        stats an actor, not an open; ``_read_metas`` reads the others)."""
        out = []
        for oid, size, mtime_ns in self.list_ids_after(namespace, after, n):
            path = self._host.path_for(namespace, oid)
            try:
                wal = os.stat(f"{path}-wal")
                signature = (size, mtime_ns, wal.st_size, wal.st_mtime_ns)
            except FileNotFoundError:
                signature = (size, mtime_ns, -1, -1)
            known = self._metas.get((namespace, oid))
            meta = known[1] if known is not None and known[0] == signature else None
            out.append(_Listed(oid, path, size, signature, meta))
        return out

    async def _read_metas(self, namespace: str, page: list[_Listed]) -> None:
        """The metas of ``page`` not remembered, read from the files ``_META_READERS`` at a time:
        each is an open of a WAL file (its shared-memory file made and mapped) and two reads,
        waits SQLite and the kernel take without the GIL (a page of 50 files no listing read yet:
        p50 35-36 ms against 40-44 one after another, quiet). Remembered here, on the loop."""
        limiter = self._meta_readers
        if limiter is None:
            limiter = self._meta_readers = anyio.CapacityLimiter(_META_READERS)
        for f in page:
            if f.meta is not None:
                self._metas.move_to_end((namespace, f.oid))

        async def read(f: _Listed) -> None:
            try:
                meta = await anyio.to_thread.run_sync(read_meta, f.path, limiter=limiter)
            except MailboxActorsError:
                f.meta = {}  # damaged or busy: listed with what the node knows, read again
                return
            f.meta = {k: v for k, v in meta.items() if k in ("owner_tenant", "schema_version")}
            self._metas[(namespace, f.oid)] = (f.signature, f.meta)
            if len(self._metas) > _METAS_KEPT:
                self._metas.popitem(last=False)

        async with anyio.create_task_group() as tg:
            for f in page:
                if f.meta is None:
                    tg.start_soon(read, f)

    def _summary(self, namespace: str, f: _Listed) -> ActorSummary:
        meta = f.meta or {}
        entry = self._book.entries.get((namespace, f.oid))
        return ActorSummary(
            namespace=namespace, id=f.oid, node=self.node_name, tenant=meta.get("owner_tenant"),
            file_bytes=f.size, active=self._host.is_active(namespace, f.oid),
            next_alarm_ms=None if entry is None else entry.at,
            schema_version=as_int(meta.get("schema_version")))

    async def _named(self, s: ActorSummary) -> ActorSummary:
        name = await self.name_of(s.namespace, s.id, s.tenant, None)
        return s if name is None else msgspec.structs.replace(s, name=name)

    async def name_of(self, namespace: str, object_id: str, tenant: str | None,
                      identity: str | None) -> str | None:
        """The name the control database knows the actor by (an identity's, a tenant's, a
        domain's), None when it knows none; remembered, as names never change."""
        key = (namespace, object_id)
        if key in self._names:
            return self._names[key]
        db = self._control
        name: str | None = None
        if db is not None and tenant is not None:
            try:
                if namespace == "identity_mailbox":
                    if identity is None:
                        identity = await anyio.to_thread.run_sync(self._owner_identity,
                                                                  namespace, object_id)
                    ident = None if identity is None else await db.get_identity(identity)
                    name = None if ident is None or ident.mailbox_id != object_id else ident.name
                elif namespace == "tenant_quota":
                    t = await db.get_tenant(tenant)
                    name = None if t is None else t.name
                elif namespace == "domain_monitor":
                    name = next((d.name for d in await db.list_domains(tenant)
                                 if d.monitor_id == object_id), None)
            except MailboxActorsError:
                return None  # not remembered: asked again next time
        self._names[key] = name
        if len(self._names) > _NAMES_KEPT:
            self._names.popitem(last=False)
        return name

    def _owner_identity(self, namespace: str, object_id: str) -> str | None:
        try:
            return read_meta(self._host.path_for(namespace, object_id)).get("owner_identity")
        except MailboxActorsError:
            return None

    # ---- one actor -------------------------------------------------------------------------

    async def show_actor(self, namespace: str, object_id: str) -> ActorDetail:
        path = self.path_of(namespace, object_id)
        entry = self._book.entries.get((namespace, object_id))
        detail = await anyio.to_thread.run_sync(functools.partial(
            view_actor, path, namespace, object_id, node=self.node_name,
            active=self._host.is_active(namespace, object_id),
            retries=0 if entry is None else entry.retry, now_ms=self._node.clock.now_ms()))
        name = await self.name_of(namespace, object_id, detail.meta.get("owner_tenant"),
                                  detail.meta.get("owner_identity"))
        return detail if name is None else msgspec.structs.replace(detail, name=name)

    # ---- rows, KV, outbox ------------------------------------------------------------------

    async def rows(self, namespace: str, object_id: str, table: str, *,
                   cursor: str | None = None, limit: int | None = None,
                   content: bool = False) -> RowsPage:
        """A page of ``table``'s rows in primary-key (or rowid) order."""
        path = self.path_of(namespace, object_id)
        if not isinstance(table, str) or not _TABLE.fullmatch(table):
            raise InvalidRequest("table must be a table name", details={"field": "table"})
        n = check_limit(limit)
        scope = f"{namespace}/{object_id}/{table}"
        position = self.cursors.read(cursor, "rows", scope)
        return await anyio.to_thread.run_sync(rows_page, self.cursors, path, namespace, table,
                                              scope, position, n, content)

    def _single(self, kind: str, namespace: str, object_id: str, cursor: str | None,
                limit: int | None, of: type) -> tuple[Path, int, str, Any]:
        """(file, page size, scope, position) of a listing whose position is one ``of`` value."""
        path, n, scope = self.path_of(namespace, object_id), check_limit(limit), \
            f"{namespace}/{object_id}"
        position = self.cursors.read(cursor, kind, scope)
        if position is not None and (len(position) != 1 or not isinstance(position[0], of)):
            raise InvalidRequest("cursor position is malformed", details={"field": "cursor"})
        return path, n, scope, None if position is None else position[0]

    async def kv(self, namespace: str, object_id: str, *, cursor: str | None = None,
                 limit: int | None = None, content: bool = False) -> KvPage:
        """A page of the actor's KV (RT-15) in key order, values decoded."""
        path, n, scope, after = self._single("kv", namespace, object_id, cursor, limit, str)
        return await anyio.to_thread.run_sync(kv_page, self.cursors, path, namespace, scope, after,
                                              n, content)

    async def outbox(self, namespace: str, object_id: str, *, cursor: str | None = None,
                     limit: int | None = None) -> OutboxPage:
        """The actor's outbox newest first: pending events, then dispatched ones."""
        path, n, scope, before = self._single("outbox", namespace, object_id, cursor, limit, int)
        return await anyio.to_thread.run_sync(outbox_page, self.cursors, path, namespace, scope,
                                              before, n)
