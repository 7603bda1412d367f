"""IdentityMailbox (OBJ-1): init, status, erase, events and daily maintenance (RPC-3, RPC-4, EV, AL-6).

The owner is the envelope's tenant and identity. ``erase`` removes the content in one transaction
and keeps only the proof of erasure; afterwards every op answers ``identity_not_found``. Every
externally visible change emits an event through the outbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, assert_never

from mailbox_actors.carrier import CanSendHook, Carrier
from mailbox_actors.carrier import schema as carrier_schema
from mailbox_actors.core.durations import DAY_MS
from mailbox_actors.core.rate_windows import RETENTION_MS
from mailbox_actors.objects import roster
from mailbox_actors.objects.identity_mailbox import (
    inbound,
    ingest_batch,
    reparse,
    search,
    sources,
    threads,
    waits,
)
from mailbox_actors.objects.identity_mailbox.inbox import Inbox
from mailbox_actors.objects.identity_mailbox.quota_gate import QuotaGate
from mailbox_actors.objects.shared_schema import META_PUT, RATE_WINDOW_PRUNE, RATE_WINDOWS_SCHEMA
from mailbox_actors.platform.mail.can_send import CAN_SEND, SendCheck
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.actor_post import Post
from mailbox_actors.post.ops import post_op
from mailbox_actors.post.sql import POST_RUNS, POST_SCHEMA
from mailbox_actors.runtime.actor import Actor, ActorContext, Call
from mailbox_actors.runtime.migrations import PLATFORM_META, Migration
from mailbox_actors.runtime.outbox import read_events
from mailbox_actors.wire.carrier import (
    ApplyDeliveryEvent,
    BeginTransport,
    CancelEmail,
    GetEmail,
    LearnMessageId,
    RecordTransportOutcome,
    ResolveEmail,
    Submit,
)
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest
from mailbox_actors.wire.events import EmitEvent, GetEvents
from mailbox_actors.wire.idempotency import IDEMPOTENT_OPS
from mailbox_actors.wire.inbound import (
    DeleteMessage,
    GetMessage,
    GetThread,
    Ingest,
    ListMessages,
    RegisterWait,
    WaitPoll,
)
from mailbox_actors.wire.mailbox import (
    MAILBOX_REPLIES,
    EmittedReply,
    EraseReply,
    MailboxErase,
    MailboxInit,
    MailboxRequest,
    MailboxStatus,
    MailboxStatusReply,
)
from mailbox_actors.wire.post import PostDeadLetters, PostRetry
from mailbox_actors.wire.search import AttachmentTextReady, Reparse, SearchMessages
from mailbox_actors.wire.shared_replies import InitReply
from mailbox_actors.wire.sources import GetAttachment, GetRawMessage

__all__ = ["IdentityMailbox"]

# Lifecycle events only the mailbox emits (init, erase): emit_event may not forge them.
_OWN_EVENTS = frozenset({"identity.created", "identity.erased"})

# Tables whose rows are the identity's content: erase empties them all.
CONTENT_TABLES = ("messages", "idempotency", *carrier_schema.TABLES)


class IdentityMailbox(Actor[MailboxRequest]):
    namespace = "identity_mailbox"
    idempotent_ops = IDEMPOTENT_OPS["identity_mailbox"]  # retried by the client (OPS-6)
    requests = MailboxRequest
    replies = MAILBOX_REPLIES
    init_request = MailboxInit
    owner_kind = "identity"
    not_found = ErrorCode.IDENTITY_NOT_FOUND
    # Post's records are not the erased content: its roster letters can still be listed and
    # retried once the mailbox is erased (objects/roster.py).
    erased_ops = (PostDeadLetters, PostRetry)
    migrations = (
        Migration(1, (
            "CREATE TABLE identity (id INTEGER PRIMARY KEY CHECK (id = 1), "
            "created_at_ms INTEGER NOT NULL, erased_at_ms INTEGER)",
            "CREATE TABLE messages (id TEXT PRIMARY KEY, received_at_ms INTEGER NOT NULL, "
            "size_bytes INTEGER NOT NULL, body BLOB)",
        )),
        Migration(2, (  # and the outbox, the runtime's since runtime schema 3
            "CREATE TABLE idempotency (key TEXT PRIMARY KEY, expires_at_ms INTEGER NOT NULL, "
            "result BLOB)",
            *RATE_WINDOWS_SCHEMA,
        )),
        Migration(3, POST_SCHEMA),  # the tenant roster goes out by Post (objects/roster.py)
        Migration(4, carrier_schema.CARRIER_SCHEMA),
        Migration(5, PLATFORM_META),
        Migration(6, inbound.INBOUND_SCHEMA),
        Migration(7, carrier_schema.CARRIER_INLINE_CONTENT),
        # Fewer b-trees per submit (the Messages; and the outbox's event, the runtime's since),
        # existing rows kept.
        Migration(8, carrier_schema.CARRIER_MESSAGES_LEAN),
        Migration(9, inbound.INBOUND_LEAN),  # bodies in the message row, one b-tree less
        # Emails and Messages found by one key: two b-trees less
        Migration(10, carrier_schema.CARRIER_ONE_KEY),
        # Only queued and dispatching Emails indexed by status
        Migration(11, carrier_schema.CARRIER_LIVE_INDEXES),
        # A just-submitted Email is found by its key, not indexed
        Migration(12, carrier_schema.CARRIER_FRESH),
        Migration(13, threads.THREAD_MERGES),  # IN-11: merged threads alias their survivor
        Migration(14, search.SEARCH_SCHEMA),  # IN-9, IN-10: the FTS5 index and attachment text
        Migration(15, POST_RUNS),  # PO-11, PO-12: Post's budget count and the seed's job id
        Migration(16, carrier_schema.CARRIER_LEARNED),  # CA-17: provider Message-IDs
        Migration(17, carrier_schema.CARRIER_UNREACHABLE),  # CA-16: unreachable is not rejected
        Migration(18, sources.RAW_SCHEMA),  # UI-2: raw sources kept with their messages
        # IN-10: the index's merges bounded per ingest, never a whole level at once
        Migration(19, search.FTS_MERGE_SCHEMA),
        # IN-10: a level of the index merged at 8 segments, not 4 (fewer pages an ingest)
        Migration(20, search.FTS_USERMERGE_SCHEMA),
        # UI-2: a small raw source in its message's row (a column added, no row copied)
        Migration(21, sources.RAW_INLINE),
    )
    alarm_purposes: ClassVar[Mapping[str, str]] = {"maintenance": "maintenance",
                                                   "post": "post_tick", "dispatch": "dispatch_tick",
                                                   "reparse": "reparse_tick"}

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.post = Post(self, roster.ROSTER)
        # Outbound mail (CA-1..CA-17): the Carrier library over this file, woken by
        # ``alarm:dispatch``, gated by the tenant's TenantQuota (RPC-9).
        self.carrier = Carrier.for_actor(ctx, purpose="dispatch", gate=QuotaGate(ctx),
                                         can_send=_can_send(ctx))
        # Inbound: what ``inbound``, ``waits`` and ``ingest_batch`` use of this mailbox.
        self.inbox = Inbox(ctx, self.sql)

    async def post_tick(self) -> None:
        await self.post.run()

    async def handle(self, call: Call, req: MailboxRequest | ingest_batch.IngestBatch) -> Any:
        match req:
            case Submit():
                return self.carrier.send(req)
            case GetEmail():
                return self.carrier.get(req.source_id)
            case CancelEmail():
                return self.carrier.cancel(req)
            case ResolveEmail():
                return self.carrier.resolve(req)
            case ApplyDeliveryEvent():
                return self.carrier.apply_delivery_event(req)
            case BeginTransport():
                return await self.carrier.begin_transport(req)
            case RecordTransportOutcome():
                return self.carrier.record_transport_outcome(req)
            case LearnMessageId():
                return self.carrier.learn_message_id(req)
            case PostDeadLetters() | PostRetry():
                return post_op(self.post, req)
            case MailboxStatus():
                return self._status()
            case GetEvents():
                return read_events(self.sql, req.after_sequence, req.limit)
            case EmitEvent():
                if not req.type.startswith("identity."):
                    raise InvalidRequest("emit_event takes identity.* event types",
                                         details={"type": req.type})
                if req.type in _OWN_EVENTS:  # receivers must be able to trust these
                    raise InvalidRequest(f"{req.type} is emitted by the mailbox itself",
                                         details={"type": req.type})
                return self.sql.transaction_sync(
                    lambda tx: EmittedReply(id=self.ctx.emit(tx, req.type, dict(req.data)).id))
            case MailboxInit():
                return self.sql.transaction_sync(lambda tx: self._init(tx, call))
            case MailboxErase():  # removes content: works on a full mailbox too
                return self.sql.transaction_freeing(self._erase)
            case SearchMessages():
                return search.search(self.sql, req)
            case Reparse():
                return reparse.reparse(self.ctx, self.sql, inbound.limits(self.inbox), req)
            case AttachmentTextReady():
                return self.sql.transaction_sync(
                    lambda tx: search.attachment_text_ready(tx, req))
            case ingest_batch.IngestBatch():  # the SMTP door's, in-process only
                return await ingest_batch.ingest_batch(self.inbox, req)
            case GetRawMessage():
                return sources.get_raw_message(sources.actor_rows(self.sql), req)
            case GetAttachment():
                return sources.get_attachment(sources.actor_rows(self.sql), req)
            case Ingest() | RegisterWait() | WaitPoll() | GetMessage() | GetThread() \
                    | ListMessages() | DeleteMessage():
                return await inbound.handle(self.inbox, req)
            case _:
                assert_never(req)

    def _init(self, tx: SqlStorage, call: Call) -> InitReply:
        created = self.ctx.claim_owner(call)
        if created:
            now = tx.now_ms()
            tx.exec("INSERT INTO identity (id, created_at_ms) VALUES (1, ?)", now)
            self.ctx.emit(tx, "identity.created", {"identity_id": call.identity_id})
            roster.send_joined(self.post, tx, call.tenant_id or "", call.identity_id or "", self.ctx.id)
            self.ctx.schedule("maintenance", now + DAY_MS)
        return InitReply(created=created)

    def _status(self) -> MailboxStatusReply:
        created = self.sql.exec("SELECT created_at_ms FROM identity WHERE id = 1").one()[0]
        return MailboxStatusReply(
            tenant_id=self.ctx.owner_tenant or "", identity_id=self.ctx.owner_identity or "",
            schema_version=self.ctx.schema_version, size_bytes=self.sql.database_size,
            alarm=self.sql.get_alarm(), created_at_ms=created, **inbound.counts(self.sql))

    def _erase(self, tx: SqlStorage) -> EraseReply:
        now = tx.now_ms()
        for table in CONTENT_TABLES:
            tx.exec(f"DELETE FROM {table}")
        inbound.erase(tx)
        reparse.erase(tx)  # IN-8: a reparse of all under way ends with the content
        # Dispatched events are history; undispatched ones (ids only) still go out.
        tx.exec("DELETE FROM outbox WHERE dispatched_at IS NOT NULL")
        tx.exec("UPDATE identity SET erased_at_ms = ? WHERE id = 1", now)
        self.ctx.emit(tx, "identity.erased", {"identity_id": self.ctx.owner_identity})
        roster.send_left(self.post, tx, self.ctx.owner_tenant or "", self.ctx.owner_identity or "")
        self.ctx.mark_erased()
        return EraseReply(erased=True, erased_at_ms=now)

    async def reparse_tick(self) -> None:
        """``alarm:reparse`` (IN-8): the next page of a reparse of every message."""
        reparse.run_page(self.ctx, self.sql, inbound.limits(self.inbox))

    async def dispatch_tick(self) -> None:
        """``alarm:dispatch`` (CA-4): Carrier's wake; see ``carrier/dispatch.py``."""
        await self.carrier.tick()

    async def maintenance(self) -> None:
        """AL-6, daily: expired idempotency rows, windows older than 48 h; then refresh
        meta.size_bytes and re-arm. (Events past the tenant's events_days are the runtime's
        to prune: ``runtime/outbox.PRUNE_PURPOSE``.)"""

        def run(tx: SqlStorage) -> None:
            now = tx.now_ms()
            tx.exec("DELETE FROM idempotency WHERE expires_at_ms <= ?", now)
            tx.exec(RATE_WINDOW_PRUNE, now - RETENTION_MS)
            waits.prune(tx, now)
            tx.exec(META_PUT, "size_bytes", str(tx.database_size))
            self.ctx.schedule("maintenance", now + DAY_MS)

        self.sql.transaction_sync(run)


def _can_send(ctx: ActorContext) -> CanSendHook | None:
    """The node's ``can_send`` hook (CA-7), told which identity's Email it is."""
    hook = ctx.service(CAN_SEND)
    if hook is None:
        return None

    async def check(email_id: str, source_id: str) -> bool:
        return await hook(SendCheck(tenant_id=ctx.owner_tenant or "",
                                    identity_id=ctx.owner_identity or "",
                                    email_id=email_id, source_id=source_id))
    return check
