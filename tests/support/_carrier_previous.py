"""An IdentityMailbox of an earlier schema whose ``submit`` and ``get_email`` write and read
Carrier's rows as the code of that layout did, by column name (the same statements serve the
layouts before migration 8 and before the one-key layout), so a test can make a file of that
layout with Emails and Messages in it and then open it with today's code. Dispatch is not part
of it: its Emails are left queued, with no wake."""

from __future__ import annotations

from typing import Any

from mailbox_actors.carrier import store
from mailbox_actors.core.carrier.digest import content_digest
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.wire.carrier import GetEmail, Submit
from mailbox_actors.wire.transport import OutboundEmail

__all__ = ["previous_mailbox"]


def previous_mailbox(migrations: tuple[Migration, ...],
                     far_message_ids: bool = False) -> type[IdentityMailbox]:
    """A mailbox class at ``migrations``; with ``far_message_ids`` each Message id is minted
    far from its Email's (other ids minted between), as ids minted across milliseconds are."""

    class PreviousMailbox(IdentityMailbox):
        async def handle(self, call: Call, req: Any) -> Any:
            if isinstance(req, Submit):
                return self.sql.transaction_sync(lambda tx: _submit(self, tx, req,
                                                                    far_message_ids))
            if isinstance(req, GetEmail):
                return _receipt(self.sql, req.source_id)
            return await super().handle(call, req)

    PreviousMailbox.migrations = migrations
    return PreviousMailbox


def _submit(mb: IdentityMailbox, tx: SqlStorage, req: Submit, far: bool) -> Any:
    now = tx.now_ms()
    email_id = mb.ctx.new_id("eml")
    header = f"<{email_id.lower()}@acme.example>"
    digest = content_digest(from_=req.from_, to=req.to, cc=req.cc, bcc=req.bcc,
                            subject=req.subject, text=req.text, html=req.html,
                            headers=req.headers, send_before=req.send_before)
    inline, _ = store.encode_content(OutboundEmail(
        email_id=email_id, message_id_header=header, from_=req.from_, to=req.to, cc=req.cc,
        bcc=req.bcc, subject=req.subject, text=req.text, html=req.html, headers=req.headers))
    tx.exec("INSERT INTO emails (email_id, source_id, digest, status, message_id_header, "
            "next_attempt_at_ms, send_before, created_at_ms, updated_at_ms, content, "
            "content_parts) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, 0)", email_id,
            req.source_id, digest, header, now, req.send_before, now, now, inline)
    recipients = ([("to", a) for a in req.to] + [("cc", a) for a in req.cc]
                  + [("bcc", a) for a in req.bcc])
    for position, (role, address) in enumerate(recipients):
        if far:
            for _ in range(100):
                mb.ctx.new_id("gap")
        tx.exec("INSERT INTO email_messages (message_id, email_id, position, role, "
                "recipient_key, status, code, created_at_ms, updated_at_ms) "
                "VALUES (?, ?, ?, ?, ?, 'queued', NULL, ?, ?)", mb.ctx.new_id("msg"), email_id,
                position, role, store.recipient_key(address), now, now)
    mb.ctx.emit(tx, "email.queued", {"email_id": email_id, "status": "queued",
                                     "messages": len(recipients)})
    return _receipt(tx, req.source_id)


def _receipt(sql: SqlStorage, source_id: str) -> Any:
    """The receipt as CA-14 shapes it, read from the rows by column name."""
    rows = sql.exec("SELECT email_id, source_id, status, message_id_header, attempts, "
                    "provider_message_id, next_attempt_at_ms, created_at_ms, updated_at_ms "
                    "FROM emails WHERE source_id = ?", source_id).all()
    if not rows:
        return None
    e = rows[0]
    messages = sql.exec("SELECT message_id, role, status, code FROM email_messages "
                        "WHERE email_id = ? ORDER BY position", e[0]).all()
    return {"email_id": e[0], "source_id": e[1], "status": e[2], "message_id_header": e[3],
            "messages": [{"message_id": m[0], "role": m[1], "status": m[2], "code": m[3]}
                         for m in messages],
            "attempts": e[4], "provider_message_id": e[5], "provider_rejection": None,
            "next_attempt_at_ms": e[6], "created_at_ms": e[7], "updated_at_ms": e[8]}
