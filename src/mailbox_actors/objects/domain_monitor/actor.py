"""DomainMonitor (OBJ-3), first cut: init {domain} and status. DNS checks come later."""

from __future__ import annotations

from typing import Any

from mailbox_actors.core.dns.names import NameRefused, normalise_domain
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.runtime.outbox import OUTBOX_SCHEMA
from mailbox_actors.wire.domain import (
    DOMAIN_REPLIES,
    DomainInit,
    DomainRequest,
    DomainStatus,
    DomainStatusReply,
)
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.shared_replies import InitReply

__all__ = ["DomainMonitor"]


class DomainMonitor(Actor):
    namespace = "domain_monitor"
    requests = DomainRequest
    replies = DOMAIN_REPLIES
    init_request = DomainInit
    owner_kind = "tenant"
    not_found = ErrorCode.DOMAIN_NOT_FOUND
    migrations = (
        Migration(1, (
            "CREATE TABLE domain (id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL, "
            "state TEXT NOT NULL, created_at_ms INTEGER NOT NULL)",
        )),
        Migration(2, OUTBOX_SCHEMA),
    )

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case DomainStatus():
                name, state = self.sql.exec("SELECT name, state FROM domain WHERE id = 1").one()
                return DomainStatusReply(tenant_id=self.ctx.owner_tenant or "", domain=name,
                                         state=state, schema_version=self.ctx.schema_version,
                                         alarm=self.sql.get_alarm())
            case DomainInit():
                return self.sql.transaction_sync(lambda tx: self._init(tx, call, req))
        raise InvalidRequest(f"unknown op for {self.namespace}")

    def _init(self, tx: SqlStorage, call: Call, req: DomainInit) -> InitReply:
        try:
            name = normalise_domain(req.domain)
        except NameRefused as e:
            raise InvalidRequest(str(e), details={"field": "domain"}) from None
        req = DomainInit(domain=name, expected=req.expected)
        created = self.ctx.claim_owner(call)
        if created:
            tx.exec("INSERT INTO domain (id, name, state, created_at_ms) VALUES (1, ?, 'pending', ?)",
                    req.domain, tx.now_ms())
            self.ctx.emit(tx, "domain.created", {"domain": req.domain, "state": "pending"})
            return InitReply(created=True)
        existing = tx.exec("SELECT name FROM domain WHERE id = 1").one()[0]
        if existing != req.domain:
            raise MailboxActorsError(ErrorCode.CONFLICT,
                                     "this monitor already watches a different domain")
        return InitReply(created=False)
