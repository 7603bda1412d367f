"""The control database (Q-3, the seed's D1): tenants, identities, domains and ``event_index``.

One SQLite file per cluster, shared by every node process through aiosqlite (WAL and short
``BEGIN IMMEDIATE`` transactions; a writer waits for another process's lock), or PostgreSQL
with ``--postgres`` (CL-7): the same records and statements on either ``SharedStore`` (the
connection, migrations and transactions are ``connection``'s; PostgreSQL's schema is
``postgres_schema``'s). Records are
checked (``checks``) before they are written; the schema is ``schema``'s. Never log, or put in an
exception, a webhook secret.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from mailbox_actors.platform.control.checks import (
    check_events_days,
    check_object_id,
    check_text,
    check_webhook,
    normalise_domain,
)
from mailbox_actors.platform.control.connection import (
    ControlConnection,
    ControlDbTooNew,
)
from mailbox_actors.platform.control.schema import MIGRATIONS
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.shared_store import Tx
from mailbox_actors.wire.control import (
    IDENTITY_STATUSES,
    Domain,
    DomainStateChange,
    EventIndexRow,
    Identity,
    Tenant,
)
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

__all__ = ["MIGRATIONS", "ControlDb", "ControlDbTooNew"]

_TENANT_COLS = "id, name, events_days, webhook_url, webhook_secret, created_at_ms, status"
_IDENTITY_COLS = "id, tenant_id, name, mailbox_id, status, created_at_ms"
_DOMAIN_COLS = "id, tenant_id, name, monitor_id, created_at_ms"
_DOMAIN_READ = _DOMAIN_COLS + ", state, state_at_ms"
_EVENT_COLS = "event_id, tenant_id, identity_id, namespace, object_id, sequence, type, occurred_at_ms"
_EVENT_NAMES = tuple(_EVENT_COLS.split(", "))
_EVENT_TYPES = ("text", "text", "text", "text", "text", "bigint", "text", "bigint")
_INDEX_ROWS = 500  # rows per INSERT statement: 4,000 parameters, under SQLite's 32,766

# Identity status moves only forward: creating -> active -> erased (or creating -> erased).
_STATUS_FROM: dict[str, tuple[str, ...]] = {
    "creating": ("creating",),
    "active": ("creating", "active"),
    "erased": ("creating", "active", "erased"),
}

_log = get_logger("mailbox_actors.control_db")


class ControlDb(ControlConnection):
    """The cluster's control database. Safe for many tasks and many processes at once."""

    # ---- tenants ------------------------------------------------------------------------------

    async def create_tenant(self, name: str, *, webhook_url: str | None = None,
                            webhook_secret: str | None = None, events_days: int = 30) -> Tenant:
        check_text("name", name, 100)
        check_events_days(events_days)
        check_webhook(webhook_url, webhook_secret)
        tenant = Tenant(id=self._ids.new_id("ten"), name=name, events_days=events_days,
                        webhook_url=webhook_url, webhook_secret=webhook_secret,
                        created_at_ms=self._clock.now_ms(), status="active")

        async def insert(conn: Tx) -> None:
            # Names are unique in a cluster (OPS-9): checked inside the write lock, so two
            # processes creating the same name cannot both succeed.
            taken = await conn.execute_fetchall("SELECT id FROM tenants WHERE name = ?", (name,))
            if taken:
                raise MailboxActorsError(ErrorCode.CONFLICT, "a tenant with this name exists",
                                         details={"tenant_id": next(iter(taken))[0]})
            await conn.execute_fetchall(
                f"INSERT INTO tenants ({_TENANT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (tenant.id, tenant.name, tenant.events_days, tenant.webhook_url,
                 tenant.webhook_secret, tenant.created_at_ms, tenant.status))

        await self.run(insert)
        _log.info("control_db.tenant_created", tenant_id=tenant.id,
                  webhook=tenant.webhook_url is not None)
        return tenant

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        row = await self.fetch_one(f"SELECT {_TENANT_COLS} FROM tenants WHERE id = ?", (tenant_id,))
        return None if row is None else Tenant(*row)

    async def tenant_by_name(self, name: str) -> Tenant | None:
        row = await self.fetch_one(f"SELECT {_TENANT_COLS} FROM tenants WHERE name = ?", (name,))
        return None if row is None else Tenant(*row)

    async def find_tenant(self, name_or_id: str) -> Tenant | None:
        """The tenant with this id, else the one with this name (OPS-9: commands take either)."""
        tenant = await self.get_tenant(name_or_id) if name_or_id.startswith("ten_") else None
        return tenant or await self.tenant_by_name(name_or_id)

    async def list_tenants(self) -> list[Tenant]:
        return [Tenant(*r) for r in await self.fetch_all(
            f"SELECT {_TENANT_COLS} FROM tenants ORDER BY id")]

    async def set_webhook(self, tenant_id: str, url: str | None, secret: str | None) -> None:
        """Replace the tenant's endpoint and secret; ``None`` for both removes the webhook."""
        check_webhook(url, secret)

        async def update(conn: Tx) -> None:
            if not await conn.execute_fetchall(
                    "UPDATE tenants SET webhook_url = ?, webhook_secret = ? WHERE id = ? "
                    "RETURNING id", (url, secret, tenant_id)):
                raise _tenant_not_found(tenant_id)

        await self.run(update)
        _log.info("control_db.webhook_set", tenant_id=tenant_id, webhook=url is not None)

    # ---- identities ---------------------------------------------------------------------------

    async def create_identity(self, tenant_id: str, name: str, mailbox_id: str) -> Identity:
        """Record a new identity in status ``creating``, before its IdentityMailbox is initialised."""
        check_text("name", name, 200)
        check_object_id("mailbox_id", mailbox_id)
        identity = Identity(id=self._ids.new_id("idn"), tenant_id=tenant_id, name=name,
                            mailbox_id=mailbox_id, status="creating",
                            created_at_ms=self._clock.now_ms())

        async def insert(conn: Tx) -> None:
            await self._require_tenant(conn, tenant_id)
            if await conn.execute_fetchall(
                    "SELECT 1 FROM identities WHERE tenant_id = ? AND name = ?", (tenant_id, name)):
                raise MailboxActorsError(ErrorCode.CONFLICT,
                                         "the tenant already has an identity with this name",
                                         details={"tenant_id": tenant_id, "field": "name"})
            if await conn.execute_fetchall(
                    "SELECT 1 FROM identities WHERE mailbox_id = ?", (mailbox_id,)):
                raise MailboxActorsError(ErrorCode.CONFLICT,
                                         "the mailbox id already belongs to another identity",
                                         details={"mailbox_id": mailbox_id})
            await conn.execute_fetchall(
                f"INSERT INTO identities ({_IDENTITY_COLS}) VALUES (?, ?, ?, ?, ?, ?)",
                (identity.id, identity.tenant_id, identity.name, identity.mailbox_id,
                 identity.status, identity.created_at_ms))

        await self.run(insert)
        _log.info("control_db.identity_created", tenant_id=tenant_id, identity_id=identity.id)
        return identity

    async def set_identity_status(self, identity_id: str, status: str) -> None:
        """Move an identity forward (creating -> active -> erased); backwards is a conflict."""
        if status not in IDENTITY_STATUSES:
            raise InvalidRequest(f"status must be one of {', '.join(IDENTITY_STATUSES)}",
                                 details={"field": "status"})

        async def move(conn: Tx) -> None:
            rows = list(await conn.execute_fetchall(
                "SELECT status FROM identities WHERE id = ?", (identity_id,)))
            if not rows:
                raise MailboxActorsError(ErrorCode.IDENTITY_NOT_FOUND, "no such identity",
                                         details={"identity_id": identity_id})
            current = rows[0][0]
            if current not in _STATUS_FROM[status]:
                raise MailboxActorsError(ErrorCode.CONFLICT,
                                         f"an identity in status {current} cannot become {status}",
                                         details={"identity_id": identity_id, "status": current})
            if current != status:
                await conn.execute_fetchall("UPDATE identities SET status = ? WHERE id = ?",
                                            (status, identity_id))

        await self.run(move)

    async def get_identity(self, identity_id: str) -> Identity | None:
        row = await self.fetch_one(f"SELECT {_IDENTITY_COLS} FROM identities WHERE id = ?",
                                   (identity_id,))
        return None if row is None else Identity(*row)

    async def get_identity_by_name(self, tenant_id: str, name: str) -> Identity | None:
        row = await self.fetch_one(
            f"SELECT {_IDENTITY_COLS} FROM identities WHERE tenant_id = ? AND name = ?",
            (tenant_id, name))
        return None if row is None else Identity(*row)

    async def list_identities(self, tenant_id: str) -> list[Identity]:
        return [Identity(*r) for r in await self.fetch_all(
            f"SELECT {_IDENTITY_COLS} FROM identities WHERE tenant_id = ? ORDER BY id", (tenant_id,))]

    # ---- domains ------------------------------------------------------------------------------

    async def create_domain(self, tenant_id: str, name: str, monitor_id: str) -> Domain:
        """Record a domain (names are case-insensitive and stored lower-cased); unique cluster-wide."""
        name = normalise_domain(name)
        check_object_id("monitor_id", monitor_id)
        domain = Domain(id=self._ids.new_id("dom"), tenant_id=tenant_id, name=name,
                        monitor_id=monitor_id, created_at_ms=self._clock.now_ms())

        async def insert(conn: Tx) -> None:
            await self._require_tenant(conn, tenant_id)
            if await conn.execute_fetchall(
                    "SELECT 1 FROM domains WHERE name = ? OR monitor_id = ?", (name, monitor_id)):
                raise MailboxActorsError(ErrorCode.CONFLICT, "the domain is already registered",
                                         details={"field": "name"})
            await conn.execute_fetchall(
                f"INSERT INTO domains ({_DOMAIN_COLS}) VALUES (?, ?, ?, ?, ?)",
                (domain.id, domain.tenant_id, domain.name, domain.monitor_id,
                 domain.created_at_ms))

        await self.run(insert)
        return domain

    async def get_domain(self, domain_id: str) -> Domain | None:
        row = await self.fetch_one(f"SELECT {_DOMAIN_READ} FROM domains WHERE id = ?", (domain_id,))
        return None if row is None else Domain(*row)

    async def get_domain_by_name(self, name: str) -> Domain | None:
        row = await self.fetch_one(f"SELECT {_DOMAIN_READ} FROM domains WHERE name = ?",
                                   (normalise_domain(name),))
        return None if row is None else Domain(*row)

    async def list_domains(self, tenant_id: str) -> list[Domain]:
        return [Domain(*r) for r in await self.fetch_all(
            f"SELECT {_DOMAIN_READ} FROM domains WHERE tenant_id = ? ORDER BY id", (tenant_id,))]

    async def set_domain_states(self, changes: Sequence[DomainStateChange]) -> None:
        """Move each domain row to its monitor's state, never back to an older event's (DM-4)."""
        if not changes:
            return
        await self.run(functools.partial(self.set_domain_states_in, changes=changes))

    async def set_domain_states_in(self, conn: Tx, changes: Sequence[DomainStateChange]) -> None:
        """``set_domain_states`` inside the caller's transaction (the outbox's dispatch, CL-14)."""
        for c in changes:
            await conn.write(
                "UPDATE domains SET state = ?, state_seq = ?, state_at_ms = ? "
                "WHERE monitor_id = ? AND state_seq < ?",
                (c.state, c.sequence, c.occurred_at_ms, c.monitor_id, c.sequence))

    # ---- event index (EV-2) -------------------------------------------------------------------

    async def index_events(self, rows: Sequence[EventIndexRow]) -> int:
        """INSERT OR IGNORE every row in one transaction; return how many were new (EV-2, EV-3)."""
        if not rows:
            return 0
        values = self._index_values(rows)
        if len(values) <= _INDEX_ROWS and not self._sql.index_lock:
            # One statement is atomic on its own: one round trip, no BEGIN and COMMIT.
            return len(await self.fetch_all(*self._index_sql(values)))
        return await self.run(functools.partial(self.index_events_in, rows=rows))

    async def index_events_in(self, conn: Tx, rows: Sequence[EventIndexRow], *,
                              count: bool = True) -> int:
        """``index_events`` inside the caller's transaction (the outbox's dispatch, CL-14); how
        many rows were new, or 0 without ``count`` (then nothing waits for an answer)."""
        values = self._index_values(rows)
        if self._sql.index_lock:
            await conn.write(self._sql.index_lock)
        new = 0
        for i in range(0, len(values), _INDEX_ROWS):
            chunk = values[i:i + _INDEX_ROWS]
            if count:
                new += len(list(await conn.execute_fetchall(*self._index_sql(chunk))))
            else:
                await conn.write(*self._index_sql(chunk))
        return new

    def index_with_clause(self, rows: Sequence[EventIndexRow]) -> tuple[str, list[Any]] | None:
        """On PostgreSQL, ``WITH ...`` taking the index's lock and inserting ``rows`` (ignoring
        those there already), for a statement that writes something else after it (the outbox's
        dispatch, CL-14: index rows and queue messages in one statement, one round trip); None
        where that cannot be (SQLite; more rows than one statement takes)."""
        if not self._sql.index_lock or not rows or len(rows) > _INDEX_ROWS:
            return None
        sql, params = self._sql.insert_rows(
            "event_index", _EVENT_NAMES, _EVENT_TYPES, self._index_values(rows),
            source_filter="EXISTS (SELECT 1 FROM index_lock)")
        return f"WITH index_lock AS ({self._sql.index_lock}), indexed AS ({sql})", params

    @staticmethod
    def _index_values(rows: Sequence[EventIndexRow]) -> list[tuple[Any, ...]]:
        for r in rows:
            if not r.event_id or not r.tenant_id:
                raise InvalidRequest("event index rows need an event_id and a tenant_id",
                                     details={"field": "event_id" if not r.event_id else "tenant_id"})
            check_object_id("object_id", r.object_id)
        return [(r.event_id, r.tenant_id, r.identity_id, r.namespace, r.object_id, r.sequence,
                 r.type, r.occurred_at_ms) for r in rows]

    def _index_sql(self, values: Sequence[tuple[Any, ...]]) -> tuple[str, list[Any]]:
        """INSERT OR IGNORE of event_index rows; RETURNING names only the rows it inserted."""
        return self._sql.insert_rows("event_index", _EVENT_NAMES, _EVENT_TYPES, values,
                                     returning="event_id")

    async def events(self, tenant_id: str, *, after_event_id: str | None = None,
                     limit: int = 100) -> list[EventIndexRow]:
        """A tenant's indexed events in the order they were indexed, after ``after_event_id`` (the
        last one of the previous page): a consumer paging on never misses one indexed late."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidRequest("limit must be an integer from 1 to 1000", details={"field": "limit"})
        after = 0
        if after_event_id is not None:
            row = await self.fetch_one("SELECT seq FROM event_index WHERE event_id = ? AND "
                                       "tenant_id = ?", (after_event_id, tenant_id))
            if row is None:
                raise InvalidRequest("after_event_id is not an indexed event of this tenant",
                                     details={"field": "after_event_id"})
            after = int(row[0])
        rows = await self.fetch_all(
            f"SELECT {_EVENT_COLS} FROM event_index WHERE tenant_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?", (tenant_id, after, limit))
        return [EventIndexRow(*r) for r in rows]

    async def counts(self) -> dict[str, int]:
        row = await self.fetch_one(
            "SELECT (SELECT count(*) FROM tenants), (SELECT count(*) FROM identities), "
            "(SELECT count(*) FROM domains), (SELECT count(*) FROM event_index)")
        assert row is not None
        return dict(zip(("tenants", "identities", "domains", "events"), row, strict=True))

    async def _require_tenant(self, conn: Tx, tenant_id: str) -> None:
        if not await conn.execute_fetchall("SELECT 1 FROM tenants WHERE id = ?", (tenant_id,)):
            raise _tenant_not_found(tenant_id)


# ---- validation and error mapping -------------------------------------------------------------


def _tenant_not_found(tenant_id: str) -> MailboxActorsError:
    return MailboxActorsError(ErrorCode.TENANT_NOT_FOUND, "no such tenant",
                              details={"tenant_id": tenant_id},
                              fix="Create the tenant first (mailbox-actors tenant create).")


