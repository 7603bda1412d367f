"""Notifier (OBJ-4, namespace ``notifier``, owner = tenant): the seed's Notifier on the Carrier
library. DomainMonitor's ``domain.failing``, ``domain.failed`` and ``domain.recovered`` reach it by
Post (``NOTIFY``); each becomes an email to the recipients the tenant set, at most one per domain
and kind per hour.

Coalescing is Carrier's replay rule: the Email's source id names the domain, the kind and the hour,
and its content is made from those alone, so a second event of the hour is a replay of the first
(the same receipt, nothing sent again). The Email is queued in the Post receiver's transaction
(``Carrier.send_in``): the admission, the Notifier's record and the Email with its wake commit
together or not at all. Carrier's receipt (``get_email``) and the operator's delivery inspection
are the evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, assert_never

from mailbox_actors.carrier import SCHEMA as CARRIER_SCHEMA
from mailbox_actors.carrier import Carrier, Submit
from mailbox_actors.core.durations import HOUR_MS
from mailbox_actors.objects.notify_routes import NOTIFIER_NAMESPACE, NOTIFY_ROUTES
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.receiver import receive
from mailbox_actors.post.routes import Route
from mailbox_actors.post.sql import POST_RECEIVER_SCHEMA
from mailbox_actors.runtime.actor import Actor, ActorContext, Call
from mailbox_actors.runtime.migrations import PLATFORM_META, Migration
from mailbox_actors.wire.carrier import GetEmail
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.idempotency import IDEMPOTENT_OPS
from mailbox_actors.wire.notifier import (
    NOTIFIER_REPLIES,
    DomainStateChanged,
    NotifierInit,
    NotifierRequest,
    NotifierStatus,
    NotifierStatusReply,
    SetRecipients,
    SetRecipientsReply,
)
from mailbox_actors.wire.post import PostDeliver, PostEnvelope
from mailbox_actors.wire.shared_replies import InitReply

__all__ = ["Notifier", "notification_source"]


_SUBJECTS = {"domain.failing": "{domain} is failing its DNS checks",
             "domain.failed": "{domain} failed verification",
             "domain.recovered": "{domain} passes its DNS checks again"}


def notification_source(domain: str, kind: str, at_ms: int) -> str:
    """The Email's source id: one per domain, kind and hour (the hour the event happened in)."""
    return f"notify:{domain}:{kind}:{at_ms // HOUR_MS}"


def _email(from_: str, to: list[str], event: DomainStateChanged) -> Submit:
    hour = event.at_ms // HOUR_MS
    since = datetime.fromtimestamp(hour * HOUR_MS / 1000, UTC).strftime("%Y-%m-%d %H:00 UTC")
    subject = _SUBJECTS[event.kind].format(domain=event.domain)
    text = (f"{subject}.\n\nEvent: {event.kind} (hour of {since}).\n"
            "Further changes of this kind for this domain in the same hour are not sent again.\n")
    return Submit(source_id=notification_source(event.domain, event.kind, event.at_ms),
                  from_=from_, to=to, subject=subject, text=text)


class Notifier(Actor[NotifierRequest]):
    namespace = NOTIFIER_NAMESPACE
    requests = NotifierRequest
    replies = NOTIFIER_REPLIES
    init_request = NotifierInit
    owner_kind = "tenant"
    not_found = ErrorCode.TENANT_NOT_FOUND
    idempotent_ops = IDEMPOTENT_OPS["notifier"]  # retried by the client (OPS-6)
    migrations = (
        Migration(1, (
            *PLATFORM_META, *POST_RECEIVER_SCHEMA, *CARRIER_SCHEMA,
            "CREATE TABLE notify_settings (id INTEGER PRIMARY KEY CHECK (id = 1), "
            "from_addr TEXT NOT NULL, recipients TEXT NOT NULL)",
            # One row per notification: its domain, kind and hour, and how many events it took.
            "CREATE TABLE notifications (source_id TEXT PRIMARY KEY, domain TEXT NOT NULL, "
            "kind TEXT NOT NULL, events INTEGER NOT NULL, email_id TEXT) WITHOUT ROWID",
        )),
    )
    alarm_purposes: ClassVar[Mapping[str, str]] = {"carrier": "carrier_tick"}

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.carrier = Carrier.for_actor(ctx, purpose="carrier")

    async def carrier_tick(self) -> None:
        await self.carrier.tick()

    async def handle(self, call: Call, req: NotifierRequest) -> Any:
        match req:
            case PostDeliver():
                return receive(self.sql, req, NOTIFY_ROUTES, self._apply)
            case GetEmail():
                return self.carrier.get(req.source_id)
            case NotifierStatus():
                return self._status()
            case SetRecipients():
                return self.sql.transaction_sync(lambda tx: self._set(tx, req))
            case NotifierInit():
                return self.sql.transaction_sync(
                    lambda tx: InitReply(created=self.ctx.claim_owner(call)))
            case _:
                assert_never(req)

    def _set(self, tx: SqlStorage, req: SetRecipients) -> SetRecipientsReply:
        recipients = list(dict.fromkeys(r.strip() for r in req.recipients))
        for address in (req.from_, *recipients):
            if "@" not in address or any(c.isspace() for c in address.strip()):
                raise MailboxActorsError(ErrorCode.INVALID_REQUEST,
                                         "recipients and from must be addresses",
                                         details={"field": "recipients"})
        tx.exec("INSERT OR REPLACE INTO notify_settings (id, from_addr, recipients) "
                "VALUES (1, ?, ?)", req.from_.strip(), "\n".join(recipients))
        self.ctx.emit(tx, "notifier.recipients_set", {"recipients": len(recipients)})
        return SetRecipientsReply(recipients=len(recipients))

    def _settings(self, sql: SqlStorage) -> tuple[str | None, list[str]]:
        rows = sql.exec("SELECT from_addr, recipients FROM notify_settings WHERE id = 1").all()
        if not rows:
            return None, []
        return rows[0][0], [r for r in str(rows[0][1]).split("\n") if r]

    def _apply(self, tx: SqlStorage, route: Route[Any, Any], address: Any, event: Any,
               env: PostEnvelope) -> dict[str, Any]:
        """In the Post receiver's transaction: one state event becomes (or joins) the hour's
        notification of its domain and kind. The answer is the Post receipt."""
        assert isinstance(event, DomainStateChanged)
        source = notification_source(event.domain, event.kind, event.at_ms)
        if tx.exec("UPDATE notifications SET events = events + 1 WHERE source_id = ?",
                   source).rows_written:
            email_id = tx.exec("SELECT email_id FROM notifications WHERE source_id = ?",
                               source).one()[0]
            return {"notification": "coalesced", "email_id": email_id}
        from_, recipients = self._settings(tx)
        email_id = None
        if from_ is not None and recipients:
            receipt = self.carrier.send_in(tx, _email(from_, recipients, event))
            email_id = receipt.email_id
        tx.exec("INSERT INTO notifications (source_id, domain, kind, events, email_id) "
                "VALUES (?, ?, ?, 1, ?)", source, event.domain, event.kind, email_id)
        return {"notification": "sent" if email_id else "no_recipients", "email_id": email_id}

    def _status(self) -> NotifierStatusReply:
        from_, recipients = self._settings(self.sql)
        sent, events, unsent = self.sql.exec(
            "SELECT count(email_id), coalesce(sum(events), 0), "
            "coalesce(sum(CASE WHEN email_id IS NULL THEN events ELSE 0 END), 0) "
            "FROM notifications").one()
        return NotifierStatusReply(tenant_id=self.ctx.owner_tenant or "", from_=from_,
                                   recipients=recipients, notifications=int(sent),
                                   coalesced=int(events) - int(sent) - int(unsent),
                                   unsent=int(unsent))
