"""IdentityMailbox's waits (IN-4): durable registrations matched by ``ingest`` in its own
transaction, so a message that arrives between ``register_wait`` and ``wait_poll`` is never missed.

A wait matches the first message received after it was registered (or, with
``received_after_ms``, the first already stored after that instant); ``wait_poll`` reads the
recorded match, ``pending`` until ``expires_at_ms``, then ``expired``. Time is the actor's clock,
so waits are deterministic under the FakeClock. Maintenance drops waits a day past expiry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from mailbox_actors.core.inbound.waits import WaitSubject, wait_matches
from mailbox_actors.objects.identity_mailbox import threads
from mailbox_actors.objects.identity_mailbox.inbound_rows import DETAIL_DECODER
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import InvalidRequest, LimitExceeded
from mailbox_actors.wire.inbound import (
    RegisterWait,
    RegisterWaitReply,
    WaitFilter,
    WaitPoll,
    WaitPollReply,
    WaitStatus,
)

if TYPE_CHECKING:
    from mailbox_actors.objects.identity_mailbox.inbox import Inbox

__all__ = ["MAX_PENDING_WAITS", "MAX_WAIT_MS", "WAITS_SCHEMA", "WAITS_TABLES", "match_new",
           "poll", "prune", "register"]

WAITS_SCHEMA = (
    "CREATE TABLE waits (id TEXT PRIMARY KEY, filter BLOB NOT NULL, "
    "registered_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, message_id TEXT, "
    "thread_id TEXT) WITHOUT ROWID",
    "CREATE INDEX waits_pending ON waits (expires_at_ms) WHERE message_id IS NULL",
)
WAITS_TABLES = ("waits",)
MAX_WAIT_MS = 86_400_000  # a wait lasts at most a day
MAX_PENDING_WAITS = 1_000  # ingest checks every pending wait: bound that work
SCAN_LIMIT = 10_000  # messages a received_after_ms registration looks back over
_KEEP_EXPIRED_MS = 86_400_000
_ENC = msgspec.msgpack.Encoder()
_FILTER = msgspec.msgpack.Decoder(WaitFilter)


def register(mb: Inbox, req: RegisterWait) -> RegisterWaitReply:
    mb.no_pending_waits = False  # before the transaction: a rolled-back one only costs a query

    def run(tx: SqlStorage) -> RegisterWaitReply:
        now = tx.now_ms()
        if req.expires_at_ms > now + MAX_WAIT_MS:
            raise InvalidRequest("expires_at_ms is more than a day ahead",
                                 details={"field": "expires_at_ms", "max_ms": MAX_WAIT_MS})
        pending = tx.exec("SELECT COUNT(*) FROM waits WHERE message_id IS NULL AND "
                          "expires_at_ms >= ?", now).one()[0]
        if pending >= MAX_PENDING_WAITS:
            raise LimitExceeded("max_pending_waits", MAX_PENDING_WAITS,
                                f"the mailbox has {pending} pending waits")
        wait_id = mb.ctx.new_id("wai")
        matched = _look_back(tx, req.filter) if req.filter.received_after_ms is not None else None
        tx.exec("INSERT INTO waits (id, filter, registered_at_ms, expires_at_ms, message_id, "
                "thread_id) VALUES (?, ?, ?, ?, ?, ?)", wait_id, _ENC.encode(req.filter), now,
                req.expires_at_ms, *(matched or (None, None)))
        return RegisterWaitReply(wait_id=wait_id)

    return mb.sql.transaction_sync(run)


def _look_back(tx: SqlStorage, f: WaitFilter) -> tuple[str, str] | None:
    """The first stored message after ``received_after_ms`` that matches, oldest first."""
    decode = DETAIL_DECODER.decode
    rows = tx.exec("SELECT id, thread_id, from_addr, subject, received_at_ms, detail FROM messages "
                   "WHERE received_at_ms > ? ORDER BY seq LIMIT ?", f.received_after_ms,
                   SCAN_LIMIT)
    for mid, tid, from_addr, subject, received, blob in rows:
        d = decode(blob)
        if wait_matches(f, WaitSubject(from_addr=from_addr,
                                       recipients=[*d.to, *d.cc, *d.delivered_to],
                                       subject=subject, headers=d.headers,
                                       received_at_ms=received)):
            return str(mid), str(tid)
    return None


def match_new(mb: Inbox, tx: SqlStorage, subject: Callable[[], WaitSubject],
              message_id: str, thread_id: str, now: int) -> None:
    """Inside ingest's transaction: record this message on every pending wait it matches
    (``subject`` makes what the filters read, only when a wait is pending)."""
    if mb.no_pending_waits:
        return
    rows = tx.exec("SELECT id, filter FROM waits WHERE message_id IS NULL AND "
                   "expires_at_ms >= ?", now).all()
    if not rows:  # a wait not pending now never becomes pending again
        mb.no_pending_waits = True
        return
    m = subject()
    for wait_id, blob in rows:
        if wait_matches(_FILTER.decode(blob), m):
            tx.exec("UPDATE waits SET message_id = ?, thread_id = ? WHERE id = ?", message_id,
                    thread_id, wait_id)


def poll(mb: Inbox, req: WaitPoll) -> WaitPollReply:
    rows = mb.sql.exec("SELECT expires_at_ms, message_id, thread_id FROM waits WHERE id = ?",
                       req.wait_id).all()
    if not rows:  # never registered, or pruned a day after it expired: it can never match
        return WaitPollReply(status=WaitStatus.EXPIRED)
    expires, message_id, thread_id = rows[0]
    if message_id is not None:
        return WaitPollReply(status=WaitStatus.MATCHED, message_id=message_id,
                             thread_id=threads.resolve(mb.sql, thread_id) or thread_id)
    if mb.sql.now_ms() > expires:
        return WaitPollReply(status=WaitStatus.EXPIRED)
    return WaitPollReply(status=WaitStatus.PENDING)


def prune(tx: SqlStorage, now: int) -> None:
    """Daily maintenance: waits a day past their expiry are gone."""
    tx.exec("DELETE FROM waits WHERE expires_at_ms < ?", now - _KEEP_EXPIRED_MS)
