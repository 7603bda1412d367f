"""IdentityMailbox (OBJ-1), first cut: init, status and erase (RPC-3, RPC-4).

The owner is the envelope's tenant and identity. ``erase`` removes the content in one transaction
and keeps only the proof of erasure; afterwards every op answers ``identity_not_found``.
"""

from __future__ import annotations

from typing import Any

from mailbox_actors.platform.sql import SqlStorage
from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.wire.common import InitReply
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest
from mailbox_actors.wire.mailbox import (
    MAILBOX_REPLIES,
    EraseReply,
    MailboxErase,
    MailboxInit,
    MailboxRequest,
    MailboxStatus,
    MailboxStatusReply,
)

__all__ = ["IdentityMailbox"]

# Tables whose rows are the identity's content: erase empties them all.
CONTENT_TABLES = ("messages",)


class IdentityMailbox(Actor):
    namespace = "identity_mailbox"
    requests = MailboxRequest
    replies = MAILBOX_REPLIES
    init_request = MailboxInit
    owner_kind = "identity"
    not_found = ErrorCode.IDENTITY_NOT_FOUND
    migrations = (
        Migration(1, (
            "CREATE TABLE identity (id INTEGER PRIMARY KEY CHECK (id = 1), "
            "created_at_ms INTEGER NOT NULL, erased_at_ms INTEGER)",
            "CREATE TABLE messages (id TEXT PRIMARY KEY, received_at_ms INTEGER NOT NULL, "
            "size_bytes INTEGER NOT NULL, body BLOB)",
        )),
    )

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case MailboxStatus():
                return self._status()
            case MailboxInit():
                return self.sql.transaction_sync(lambda tx: self._init(tx, call))
            case MailboxErase():
                return self.sql.transaction_sync(self._erase)
        raise InvalidRequest(f"unknown op for {self.namespace}")

    def _init(self, tx: SqlStorage, call: Call) -> InitReply:
        created = self.ctx.claim_owner(call)
        if created:
            tx.exec("INSERT INTO identity (id, created_at_ms) VALUES (1, ?)", tx.now_ms())
        return InitReply(created=created)

    def _status(self) -> MailboxStatusReply:
        created = self.sql.exec("SELECT created_at_ms FROM identity WHERE id = 1").one()[0]
        return MailboxStatusReply(
            tenant_id=self.ctx.owner_tenant or "", identity_id=self.ctx.owner_identity or "",
            schema_version=self.ctx.schema_version, size_bytes=self.sql.database_size,
            alarm=self.sql.get_alarm(), created_at_ms=created)

    def _erase(self, tx: SqlStorage) -> EraseReply:
        now = tx.now_ms()
        for table in CONTENT_TABLES:
            tx.exec(f"DELETE FROM {table}")
        tx.exec("UPDATE identity SET erased_at_ms = ? WHERE id = 1", now)
        self.ctx.mark_erased()
        return EraseReply(erased=True, erased_at_ms=now)
