"""The SMTP door (IN-5): aiosmtpd on loopback, delivering into the recipients' IdentityMailboxes.

RCPT is resolved in the control database (an unknown address: 550 5.1.1; the database away: 451),
through an ``AddressBook`` that keeps answers until an address or identity changes.
DATA is ingested into each recipient's IdentityMailbox through the router's call path (an envelope
built here, not encoded: the router's id and host checks, counted as RPC) when this node owns it,
and through the app's forwarding, exactly as RPC does, when another node does; 250 is answered
only after every ingest committed. Over the cap: 552; an owner that cannot be reached now: 451.
Messages for one owned mailbox whose DATA ends in the same turn of the event loop, or while
another session has a message on its way to it (its recipient accepted, DATA not yet ended; a
wait of at most ``smtp_batch.LINGER_S``), commit in one transaction (``smtp_batch``), each
answered as it would be alone.
The door prepends ``Delivered-To`` (so a Bcc recipient's waits can match on ``to``) and derives the
source id from the recipient (identity and address) and the bytes, so a client's retry after a
lost 250 is a duplicate, and two addresses of one identity get a copy each.
Nothing it logs carries an address; aiosmtpd's own logger is cut to warnings without arguments.
In dev mode (UI-6) an unknown recipient of a configured domain (a domain of the control database,
or the domain of an identity's address) is taken into that tenant's ``catch-all`` identity,
created at its first message.
It serves with ``smtp_door_session.DoorSession``: aiosmtpd's session, with addresses and DATA read
more cheaply and tested to answer as stock aiosmtpd does.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Callable
from email.parser import BytesHeaderParser
from email.policy import compat32
from email.utils import parseaddr
from typing import TYPE_CHECKING, Any

import msgspec
from aiosmtpd.smtp import SMTP, Envelope, Session

from mailbox_actors.core.inbound.addresses import normalize_address
from mailbox_actors.http.server import HttpApp
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.node.smtp_batch import LINGER_S, Batches
from mailbox_actors.node.smtp_door_session import DoorSession, smtp_server
from mailbox_actors.objects.identity_mailbox.ingest_batch import BATCH_ITEM_MAX_BYTES, IngestBatch
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.control.addresses import AddressBook, Recipient
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.metrics import Metrics
from mailbox_actors.rpc.router import LONG_DEADLINE_MS, Router
from mailbox_actors.wire.carrier import LearnMessageId
from mailbox_actors.wire.envelope import ENVELOPE_VERSION, RpcReply
from mailbox_actors.wire.envelope import Envelope as RpcEnvelope
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.inbound import Ingest, IngestReply
from mailbox_actors.wire.transport import EMAIL_ID_HEADER

if TYPE_CHECKING:
    from mailbox_actors.node.node import Node

__all__ = ["CATCH_ALL", "DoorSession", "SmtpDoor", "smtp_server"]

_ENC = msgspec.json.Encoder()
_DELIVERED = "250 2.0.0 Delivered"
_MAILBOX = "identity_mailbox"
_REPLY = msgspec.json.Decoder(RpcReply)
_log = get_logger("mailbox_actors.smtp")


class _NoArgs(logging.Filter):
    """aiosmtpd logs each command line (RCPT TO:<address>) at INFO: keep warnings only, and only
    their message templates (no arguments, no traceback), so no address reaches a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return False
        record.msg, record.args, record.exc_info, record.exc_text = str(record.msg), None, None, None
        return True


_mail_log = logging.getLogger("mail.log")
_mail_log.addFilter(_NoArgs())


class _Handler:
    def __init__(self, door: SmtpDoor) -> None:
        self.door = door

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        if self.door.is_journal(address):  # CA-17: a provider's journal copy, no mailbox
            envelope.ma_journal = True  # type: ignore[attr-defined]
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(rcpt_options)
            self.door.metrics.inc("smtp_rcpt_total", (("outcome", "journal"),))
            return "250 2.1.5 Journal ok"
        try:
            found = await self.door.resolve(address)
        except MailboxActorsError:
            self.door.metrics.inc("smtp_rcpt_total", (("outcome", "lookup_failed"),))
            return "451 4.3.0 Recipient lookup failed now; try again later"
        if found is None:
            self.door.metrics.inc("smtp_rcpt_total", (("outcome", "unknown"),))
            return "550 5.1.1 No such recipient here"
        targets: list[tuple[str, Recipient]] = getattr(envelope, "ma_targets", [])
        targets.append((address, found))
        envelope.ma_targets = targets  # type: ignore[attr-defined]
        self.door.on_its_way(envelope, found)
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        self.door.metrics.inc("smtp_rcpt_total", (("outcome", "accepted"),))
        return "250 2.1.5 Recipient ok"

    def envelope_ends(self, envelope: Envelope) -> None:
        """``DoorSession``'s call when an envelope is done with (its DATA answered, a reset, the
        connection gone): its messages are no longer on their way to their mailboxes."""
        self.door.not_coming(envelope)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.door.not_coming(envelope)  # handed over now: no batch waits for it any longer
        raw = envelope.original_content
        if not isinstance(raw, bytes):
            raw = envelope.content if isinstance(envelope.content, bytes) else b""
        targets: list[tuple[str, Recipient]] = getattr(envelope, "ma_targets", [])
        worst = _DELIVERED
        if getattr(envelope, "ma_journal", False):
            worst = await self.door.journal(raw)
        for address, rcpt in targets:
            reply = await self.door.deliver(address, rcpt, raw)
            if reply.startswith("4") or (reply.startswith("5") and worst.startswith("2")):
                worst = reply  # a temporary failure wins: the client retries, duplicates dedupe
        self.door.metrics.inc("smtp_messages_total", (("outcome", worst[:3]),))
        return worst


@functools.lru_cache(maxsize=4096)
def _as_booked(address: str) -> str:
    """The address as the identity's book has it (lower-cased), or as typed when it is not a
    plain one; kept for the next message to it (6.5 us a message, loaded, read anew)."""
    return normalize_address(address) or address


CATCH_ALL = "catch-all"  # UI-6: the identity dev mode's door takes unknown recipients into


class _AppCaller:
    """The door as control_ops' Caller: ids minted here, calls through the app to their owner."""

    def __init__(self, door: SmtpDoor) -> None:
        self._door = door

    def new_unique_id(self, namespace: str) -> str:
        return self._door.router.new_unique_id(namespace)

    def id_from_name(self, namespace: str, name: str) -> str:
        return self._door.router.id_from_name(namespace, name)

    async def call(self, namespace: str, object_id: str, req: Any, *, tenant_id: str | None = None,
                   identity_id: str | None = None) -> Any:
        return await self._door.call(namespace, object_id, req, tenant_id=tenant_id,
                                     identity_id=identity_id)


class SmtpDoor:
    """``await SmtpDoor.for_node(app, node, cluster_token).start(host, port)``; ``await door.stop()``.

    Its collaborators arrive in the constructor: ``app``, the HTTP application every call that
    leaves this process goes through (to the owning node or the slot's holder); ``router``, for
    ids and for ingesting in process; ``owned_here(mailbox_id)``, whether a mailbox is ingested
    in process (None: every delivery goes through ``app``, as on a machine of many);
    ``control_db``, where RCPT is resolved (None: refused with 451 until there is one); and the
    node's ``ids``, ``clock`` and ``metrics``."""

    def __init__(self, app: HttpApp, cluster_token: str, *, router: Router,
                 control_db: ControlDb | None, ids: Ids, clock: Clock, metrics: Metrics,
                 owned_here: Callable[[str], bool] | None, max_message_bytes: int,
                 hostname: str = "mailbox-actors", catch_all: bool = False,
                 journal_address: str | None = None, linger_s: float = LINGER_S) -> None:
        self.app = app
        # CA-17: mail to this address is a provider's journal copy of an Email sent here.
        self.journal_address = journal_address.strip().lower() if journal_address else None
        self.router = router
        self.control_db = control_db
        self.ids = ids
        self.clock = clock
        self.owned_here = owned_here
        self.catch_all = catch_all
        self._catch_all_lock = asyncio.Lock()
        self._auth = {"authorization": f"Bearer {cluster_token}",
                      "content-type": "application/json"}
        self.max_message_bytes = max_message_bytes
        self.hostname = hostname
        self._server: asyncio.base_events.Server | None = None
        self._handler = _Handler(self)
        self._book: AddressBook | None = None
        self._batches: Batches[Recipient] = Batches(self._alone, self._together,
                                                    linger_s=linger_s)
        self.metrics = metrics
        metrics.describe("smtp_rcpt_total", "SMTP RCPT commands by outcome", "counter")
        metrics.describe("smtp_messages_total", "SMTP DATA answers by status code", "counter")
        metrics.describe("smtp_journal_total", "journal copies (CA-17) by outcome", "counter")

    @classmethod
    def for_node(cls, app: HttpApp, node: Node, cluster_token: str, *, max_message_bytes: int,
                 hostname: str = "mailbox-actors", catch_all: bool = False,
                 journal_address: str | None = None, linger_s: float = LINGER_S) -> SmtpDoor:
        """The door of one node: mailboxes this node owns are ingested in process, the others
        through ``app`` (the node's HTTP application, which forwards to their owner)."""
        forwarding = node.forwarding
        return cls(app, cluster_token, router=node.router, control_db=node.control_db,
                   ids=node.ids, clock=node.clock, metrics=node.metrics,
                   owned_here=lambda mid: forwarding.elsewhere(_MAILBOX, mid) is None,
                   max_message_bytes=max_message_bytes, hostname=hostname, catch_all=catch_all,
                   journal_address=journal_address, linger_s=linger_s)

    def is_journal(self, address: str) -> bool:
        return self.journal_address is not None and address.strip().lower() == self.journal_address

    async def journal(self, raw: bytes) -> str:
        """CA-17: a journal copy, which a provider that rewrites Message-ID sends of each Email:
        the Email is named by the header Carrier stamped it with, its mailbox by the sender's
        address, and the copy's Message-ID is the one the provider gave it. Nothing is stored
        but that id (``learn_message_id``); the copy itself is not mail for anyone."""
        head = BytesHeaderParser(policy=compat32).parsebytes(raw)
        email_id = str(head.get(EMAIL_ID_HEADER) or "").strip()
        message_id = str(head.get("Message-ID") or "").strip()
        sender = parseaddr(str(head.get("From") or ""))[1]
        rcpt = None
        if email_id and message_id and sender:
            try:
                if self.control_db is None:
                    raise MailboxActorsError(ErrorCode.UNAVAILABLE, "no control database")
                if self._book is None:
                    self._book = AddressBook(self.control_db)
                rcpt = await self._book.resolve(sender)
            except MailboxActorsError:
                return "451 4.3.0 The sender's mailbox cannot be looked up now; try again later"
        if rcpt is None:
            self.metrics.inc("smtp_journal_total", (("outcome", "not_a_copy"),))
            return "550 5.7.1 Not a journal copy of an Email sent here"
        try:
            await self.call(_MAILBOX, rcpt.mailbox_id,
                            LearnMessageId(email_id=email_id[:64], message_id=message_id[:998]),
                            tenant_id=rcpt.tenant_id, identity_id=rcpt.identity_id)
        except MailboxActorsError as e:
            _log.warning("smtp_journal_refused", identity_id=rcpt.identity_id,
                         code=e.code.value)
            self.metrics.inc("smtp_journal_total", (("outcome", e.code.value),))
            if e.code is ErrorCode.CONFLICT:  # another id was learnt: nothing to retry
                return _DELIVERED
            if e.code.retryable:
                return "451 4.3.0 The sender's mailbox cannot be reached now; try again later"
            return "550 5.7.1 Not a journal copy of an Email sent here"
        self.metrics.inc("smtp_journal_total", (("outcome", "learnt"),))
        return _DELIVERED

    async def resolve(self, address: str) -> Recipient | None:
        """The recipient of ``address`` from the control database (None: no active identity has
        it). Answers are kept until an address or identity changes anywhere in the cluster, so
        a new address works at once and a removed or erased one is refused at once."""
        db = self.control_db
        if db is None:
            raise MailboxActorsError(ErrorCode.UNAVAILABLE, "no control database")
        if self._book is None:
            self._book = AddressBook(db)
        found = await self._book.resolve(address)
        if found is None and self.catch_all:
            found = await self._catch_all(db, address)
        return found

    async def _catch_all(self, db: ControlDb, address: str) -> Recipient | None:
        """Dev mode (UI-6): the catch-all identity of the tenant whose domain ``address`` is at
        (None: the domain is nobody's). Created, through the cluster, at its first message."""
        a = normalize_address(address)
        if a is None:
            return None
        domain = a.rpartition("@")[2]
        tenant_id = None
        dom = await db.get_domain_by_name(domain)
        if dom is not None:
            tenant_id = dom.tenant_id
        else:
            row = await db.fetch_one(
                "SELECT i.tenant_id FROM addresses a JOIN identities i ON i.id = a.identity_id "
                "WHERE a.address LIKE ? ESCAPE '\\' AND i.status = 'active' LIMIT 1",
                ("%@" + domain.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_"),))
            tenant_id = None if row is None else str(row[0])
        if tenant_id is None:
            return None
        async with self._catch_all_lock:
            ident = await db.get_identity_by_name(tenant_id, CATCH_ALL)
            if ident is None or ident.status == "creating":
                try:
                    ident = await create_identity(db, _AppCaller(self), tenant_id, CATCH_ALL)
                except MailboxActorsError as e:
                    if e.code is not ErrorCode.CONFLICT:
                        raise
                    # Another node's door made it first: finish (init is idempotent) and use it.
                    ident = await create_identity(db, _AppCaller(self), tenant_id, CATCH_ALL)
        if ident.status != "active":
            return None
        return Recipient(tenant_id=tenant_id, identity_id=ident.id, mailbox_id=ident.mailbox_id)

    def _protocol(self) -> SMTP:
        return smtp_server(self._handler, max_message_bytes=self.max_message_bytes,
                           hostname=self.hostname, session=DoorSession)

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        await self._batches.drain()
        if self._book is not None:
            self._book.close()
            self._book = None

    def on_its_way(self, envelope: Envelope, rcpt: Recipient) -> None:
        """RCPT accepted ``rcpt``: a message is on its way to its mailbox (a batch for it may
        wait for it, ``smtp_batch``) until ``not_coming(envelope)``."""
        if self.owned_here is None or not self.owned_here(rcpt.mailbox_id):
            return  # forwarded, never batched here
        coming: list[str] = getattr(envelope, "ma_coming", [])
        coming.append(rcpt.mailbox_id)
        envelope.ma_coming = coming  # type: ignore[attr-defined]
        self._batches.expect(rcpt.mailbox_id)

    def not_coming(self, envelope: Envelope) -> None:
        """The envelope's messages are handed over, or will not come (at most once each)."""
        coming: list[str] = getattr(envelope, "ma_coming", [])
        envelope.ma_coming = []  # type: ignore[attr-defined]
        for key in coming:
            self._batches.release(key)

    async def deliver(self, address: str, rcpt: Recipient, raw: bytes) -> str:
        """Ingest ``raw`` into the recipient's IdentityMailbox; the SMTP reply for it."""
        # The address as the identity's book knows it (the client's case is not kept): a retry
        # that writes it in another case, or one envelope naming it twice so, is one message.
        shown = _as_booked(address)
        data = b"Delivered-To: " + shown.encode("utf-8", "replace") + b"\r\n" + raw
        # The identity and the bytes as stored, Delivered-To included: a retry of the same
        # message to the same address is a duplicate; its copy for another address of the same
        # identity is a message of its own, not a conflict.
        source = "smtp:" + hashlib.sha256(rcpt.identity_id.encode() + b"\0" + data).hexdigest()
        item = Ingest(source_id=source, raw=data)
        if self.owned_here is None or not self.owned_here(rcpt.mailbox_id):
            return await self._forward(rcpt, item)
        if len(data) > BATCH_ITEM_MAX_BYTES:
            return await self._alone(rcpt, item)
        # This node owns the mailbox: with the others for it that end DATA in this turn of the
        # loop, in one transaction (smtp_batch).
        return await self._batches.deliver(rcpt.mailbox_id, rcpt, item)

    def _envelope(self, rcpt: Recipient, req: Ingest | IngestBatch) -> RpcEnvelope[Any]:
        return RpcEnvelope(
            v=ENVELOPE_VERSION, tenant_id=rcpt.tenant_id, identity_id=rcpt.identity_id,
            request_id=self.ids.new_id("req"), actor_key_id=None,
            deadline_ms=self.clock.now_ms() + LONG_DEADLINE_MS, req=req)

    async def _alone(self, rcpt: Recipient, item: Ingest) -> str:
        """One message into a mailbox this node owns: the router's call path without the
        envelope's bytes (the message would be base64-encoded into JSON only to be decoded)."""
        try:
            await self.router.call_envelope(_MAILBOX, rcpt.mailbox_id,
                                                     self._envelope(rcpt, item))
        except MailboxActorsError as e:
            return self._refused(rcpt, e.code)
        return _DELIVERED

    async def _together(self, rcpt: Recipient, items: list[Ingest]) -> list[str]:
        """Several messages into one mailbox this node owns, in one transaction; should the call
        fail as a whole, each goes alone, so each answer is what it would have been alone."""
        try:
            answers = await self.router.call_envelope(
                _MAILBOX, rcpt.mailbox_id, self._envelope(rcpt, IngestBatch(items=items)))
        except MailboxActorsError:
            return [await self._alone(rcpt, item) for item in items]
        return [_DELIVERED if isinstance(a, IngestReply) else self._refused(rcpt, a.code)
                for a in answers]

    async def _forward(self, rcpt: Recipient, item: Ingest) -> str:
        """One message into a mailbox another node owns: through the app, as RPC forwards."""
        answer = await self.app("POST", f"/rpc/{_MAILBOX}/{rcpt.mailbox_id}",
                                self._auth, _ENC.encode(self._envelope(rcpt, item)))
        status, out = answer[0], answer[1]
        if status == 413:
            return "552 5.3.4 Message too big to forward inside this cluster (max_body_bytes)"
        err: Any = None
        if status == 200:
            try:
                err = _REPLY.decode(out).err
            except msgspec.DecodeError:
                err = "undecodable"
        else:
            err = f"http {status}"
        if err is None:
            return _DELIVERED
        return self._refused(rcpt, getattr(err, "code", None), err)

    async def call(self, namespace: str, object_id: str, req: Any, *, tenant_id: str | None,
                   identity_id: str | None = None) -> Any:
        """One RPC through the app (so to the owning node), as a Caller of control_ops."""
        body = _ENC.encode(RpcEnvelope(
            v=ENVELOPE_VERSION, tenant_id=tenant_id, identity_id=identity_id,
            request_id=self.ids.new_id("req"), actor_key_id=None,
            deadline_ms=self.clock.now_ms() + LONG_DEADLINE_MS, req=req))
        status, out = (await self.app("POST", f"/rpc/{namespace}/{object_id}", self._auth,
                                      body))[:2]
        reply = _REPLY.decode(out) if status == 200 else None
        if reply is None or reply.err is not None:
            err = None if reply is None else reply.err
            raise MailboxActorsError(err.code if err is not None else ErrorCode.UNAVAILABLE,
                                     err.message if err is not None else f"http {status}")
        return reply.ok

    def _refused(self, rcpt: Recipient, code: ErrorCode | None, err: Any = None) -> str:
        """The SMTP reply for an ingest that failed with ``code`` (None: no error body came)."""
        _log.warning("smtp_ingest_failed", identity_id=rcpt.identity_id,
                     code=str(code.value if code is not None else err))
        if code is ErrorCode.LIMIT_EXCEEDED:
            return "552 5.3.4 Message exceeds the mailbox's size cap"
        if code in (ErrorCode.IDENTITY_NOT_FOUND,):
            return "550 5.1.1 No such recipient here"
        if code is not None and not code.retryable and code is not ErrorCode.OVERLOADED:
            return "554 5.6.0 Message refused"
        return "451 4.3.0 The recipient's mailbox cannot be reached now; try again later"
