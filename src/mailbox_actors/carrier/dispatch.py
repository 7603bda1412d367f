"""Carrier's dispatch (CA-4, CA-5, CA-7, CA-11): ``tick`` (from the host's wake), and ``begin_transport`` /
``record_transport_outcome`` for a dispatcher outside the actor.

For each due Email, in order: expiry, then the ``can_send`` hook, then a TenantQuota reservation
(RPC-9; a full window delays, never drops), then dispatch intent committed, then the transport
called outside any transaction, then its outcome committed. A run first settles what an earlier
run left ``dispatching`` (the node died, or an outside dispatcher's lease ended): that is
``outcome_unknown``, and it is never sent again. Without a transport, mail stays queued and is
looked at again every ``recheck_ms``.
"""

from __future__ import annotations

import asyncio

import anyio

from mailbox_actors.carrier import dispatch_rows, store
from mailbox_actors.carrier.sends import Sends
from mailbox_actors.carrier.state import CarrierState, GateRun
from mailbox_actors.carrier.store import EmailRow
from mailbox_actors.core.carrier.states import EmailStatus, MessageStatus
from mailbox_actors.platform.mail.transport import Transport
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.carrier import BeginTransport, Receipt, RecordTransportOutcome, TransportLease
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.transport import (
    OutboundEmail,
    OutcomeUnknown,
    TransportOutcome,
)

__all__ = ["CAN_SEND_RETRY_MS", "DISPATCH_CONCURRENCY", "DISPATCH_RUN_MAX", "begin_transport",
           "has_pending_work", "record_transport_outcome", "tick"]

CAN_SEND_RETRY_MS = 60_000  # can_send raised: its truth is unavailable now
# Emails of one identity in flight at once (the SMTP transport pools as many connections).
DISPATCH_CONCURRENCY = 4
# Due Emails one query reads ahead: it serves several rounds, and sizes the quota block.
_READ_AHEAD = 32
# Emails one alarm run starts at most: then it re-arms for now, so the outbox (and every other
# purpose of the mailbox) gets its turn during a long backlog.
DISPATCH_RUN_MAX = 256
# How long an outcome may wait for others to share its commit (see ``_send_due``): far below
# what a receipt reader notices, about a send on loopback.
_LINGER_S = 0.005


async def tick(c: CarrierState) -> None:
    """From the host's wake: settle interrupted dispatches, send every due Email, re-arm the
    wake while work is pending."""
    ran_at = c.host.scheduled_wake()
    c.wake.run_started()
    try:
        c.host.commit(lambda tx: _sweep(c, tx))
        transport = c.transport
        if transport is not None:
            await _send_due(c, transport)
        c.host.commit(lambda tx: _rearm(c, tx, ran_at, transport is not None))
    finally:
        c.wake.run_ended()  # the host now clears or keeps the wake (CLEARED_WITHOUT_AWAIT)


def has_pending_work(c: CarrierState) -> bool:
    """Whether an Email is queued or dispatching (the wake must stay armed)."""
    pending: int = c.sql.exec("SELECT EXISTS (SELECT 1 FROM emails WHERE status = 'queued') OR "
                              "EXISTS (SELECT 1 FROM emails WHERE status = 'dispatching')").one()[0]
    return pending == 1


async def _send_due(c: CarrierState, transport: Transport) -> None:
    """Send every due Email, up to ``DISPATCH_CONCURRENCY`` at once (each on its own transport
    connection, so one Email's database work overlaps another's time on the wire); returns
    when none is due and none is in flight. Each Email still goes checks, intent, send, outcome
    in that order; what changes is how many share a commit: the outcomes that came back since
    the last look and the intents of the Emails about to start commit in one transaction, and
    only after it commits are those Emails handed to the transport (CA-4).

    A transport with fewer connections (``slots``) than Emails in flight has Emails with intent
    waiting for a connection: while one of them is still waiting, the wire is not about to idle,
    so an outcome waits (at most ``_LINGER_S``) for the next ones and they commit together, with
    the intents of as many new Emails, one commit for several Emails instead of one each."""
    slots = max(1, int(getattr(transport, "slots", DISPATCH_CONCURRENCY)))
    # The sends run in at most DISPATCH_CONCURRENCY worker tasks, fed in intent order and
    # started as the run needs them: a task spawned for each Email cost more than its intent.
    sends = Sends(lambda email: _send(transport, email), lambda: c.host.erased)
    in_flight = sends.in_flight
    skipped: set[str] = set()  # failed a check this run (delayed, ended): not looked at again
    due: list[EmailRow] = []  # read ahead, not started yet (intent re-reads each row)
    gate = _gate_run(c)
    started = 0
    contents: dict[str, bytes] = {}  # inline content read ahead with ``due``
    try:
        async with anyio.create_task_group() as tg:
            while True:
                if sends.finished and len(in_flight) > slots:  # an Email with intent waits
                    await sends.linger(slots, _LINGER_S)
                sends.changed.clear()
                ready: list[EmailRow] = []
                free = min(DISPATCH_CONCURRENCY - len(in_flight), DISPATCH_RUN_MAX - started)
                checked = False
                if free > 0:
                    if not due:  # read a few ahead: one query serves several rounds
                        due = []
                        contents.clear()  # what started took its own; the rest is read again
                        for r, inline in c.fresh.due(
                                c.sql, c.host.now_ms(),
                                _READ_AHEAD + len(skipped) + len(in_flight)):
                            if r.email_id not in skipped and r.email_id not in in_flight:
                                due.append(r)
                                if inline is not None:
                                    contents[r.email_id] = inline
                    if gate is not None:
                        gate.due = min(len(due), DISPATCH_RUN_MAX - started)
                    take, due = due[:free], due[free:]
                    for row in take:
                        started, checked = started + 1, True
                        if await _checks(c, row, gate):
                            ready.append(row)
                        else:  # ended or delayed (a full quota delays every due Email)
                            skipped.add(row.email_id)
                            due = []
                emails: list[tuple[EmailRow, OutboundEmail]] = []
                if sends.finished or ready:
                    emails = _commit(c, sends.take(), ready, contents)
                for row, email in emails:
                    sends.hand(row, email)
                while sends.workers < len(in_flight):
                    tg.start_soon(sends.worker)
                    sends.workers += 1
                if not in_flight and not sends.finished:
                    if not checked:
                        sends.close()  # the workers end with the run
                        break  # none due, none in flight: the run is over
                    continue  # this round's rows ended before intent: look for more
                if not emails and not sends.finished:
                    await sends.changed.wait()
                    # Sends whose replies came in the same moment finish on this turn of the
                    # loop: their outcomes share the next round's commit.
                    await asyncio.sleep(0)
    finally:
        sends.close()
        if sends.finished:  # cancelled with outcomes in hand: commit them, the sweep cannot know
            _commit(c, sends.take(), [], {})
    if gate is not None:
        await gate.end()  # not on cancellation: an unreleased reservation ages out


def _gate_run(c: CarrierState) -> GateRun | None:
    if c.gate is None:
        return None
    return c.gate.run(lambda wait_ms: c.host.commit(
        lambda tx: c.fresh.delay(tx, tx.now_ms() + max(1, wait_ms))))


def _commit(c: CarrierState, outcomes: list[tuple[EmailRow, TransportOutcome]],
            ready: list[EmailRow], contents: dict[str, bytes]
            ) -> list[tuple[EmailRow, OutboundEmail]]:
    # A plain function for transaction_sync: a partial costs an inspect unwrap per commit.
    return c.host.commit(lambda tx: _commit_round(c, outcomes, ready, contents, tx))


def _commit_round(c: CarrierState, outcomes: list[tuple[EmailRow, TransportOutcome]],
                  ready: list[EmailRow], contents: dict[str, bytes], tx: SqlStorage
                  ) -> list[tuple[EmailRow, OutboundEmail]]:
    """One transaction: the outcomes that came back, then dispatch intent for ``ready``; the
    Emails now ``dispatching`` (to send once this commits). ``contents``: inline content read
    ahead (each taken out as its Email starts)."""
    for row, outcome in outcomes:
        dispatch_rows.record(c.host, tx, row, outcome, c.settings.unreachable_window_ms)
    emails = []
    for row in ready:
        started = dispatch_rows.intent(c.host, tx, row, None, contents.pop(row.email_id, None))
        if started is not None and started[1] is not None:
            emails.append((started[0], started[1]))
    return emails


def _sweep(c: CarrierState, tx: SqlStorage) -> None:
    """What an earlier run (or an outside dispatcher whose lease ended) left ``dispatching`` is
    ``outcome_unknown``: the body may have gone, so it is never sent again (CA-4)."""
    stale = store.rows_where(tx, "status = 'dispatching' AND (lease_until_ms IS NULL OR "
                             "lease_until_ms <= ?)", tx.now_ms())
    for row in stale:
        reason = "interrupted" if row.lease_until_ms is None else "lease_expired"
        store.move(c.host, tx, row, EmailStatus.OUTCOME_UNKNOWN, {"reason": reason},
                   lease_until_ms=None)
        store.set_messages(tx, row.email_id, MessageStatus.UNKNOWN, only=[MessageStatus.QUEUED])


def _rearm(c: CarrierState, tx: SqlStorage, ran_at: int | None, has_transport: bool) -> None:
    now = tx.now_ms()
    c.fresh.store(tx)
    queued = c.fresh.next_due(tx)
    leased = tx.exec("SELECT min(lease_until_ms) FROM emails "
                     "WHERE status = 'dispatching'").one()[0]
    if queued is not None and not has_transport:
        queued = max(queued, now + c.settings.recheck_ms)
    times = [t for t in (queued, leased) if t is not None]
    if not times:
        return
    at = max(min(times), now)
    if at == ran_at:
        at += 1  # the host clears the wake it ran when its time is unchanged
    c.host.set_wake(at)


async def _prepare(c: CarrierState, row: EmailRow, lease_ms: int | None
                   ) -> OutboundEmail | None:
    """The checks before intent, then intent committed; the Email to send, or None (it ended,
    was delayed, or changed meanwhile)."""
    gate = _gate_run(c)
    try:
        if not await _checks(c, row, gate):
            return None
    finally:
        if gate is not None:
            await gate.end()
    started = c.host.commit(lambda tx: dispatch_rows.intent(c.host, tx, row, lease_ms))
    return None if started is None else started[1]


async def _checks(c: CarrierState, row: EmailRow, gate: GateRun | None) -> bool:
    """Expiry, ``can_send``, then the gate: True when the Email may go on to intent; False when
    it ended or was delayed (each committed here)."""
    host = c.host
    if row.send_before is not None and host.now_ms() >= row.send_before:
        def expire(tx: SqlStorage) -> None:
            # ``row`` was read ahead: an Email cancelled since is left as it is.
            if store.move_if(host, tx, row, EmailStatus.EXPIRED, next_attempt_at_ms=None):
                store.set_messages(tx, row.email_id, MessageStatus.NOT_SENT)
        host.commit(expire)
        return False
    hook = c.can_send
    if hook is not None:
        try:
            ok = await hook(row.email_id, row.source_id)
        except Exception as e:  # its truth is unavailable: leave it unsent, look again later
            host.log.warning("carrier_can_send_failed", email_id=row.email_id,
                             error=type(e).__name__)
            host.commit(lambda tx: tx.exec(
                "UPDATE emails SET next_attempt_at_ms = ?, fresh = NULL WHERE seq = ?",
                tx.now_ms() + CAN_SEND_RETRY_MS, row.seq))
            return False
        if not ok:
            def supersede(tx: SqlStorage) -> None:
                now_row = store.row_by_seq(tx, row.seq)
                if now_row is not None and now_row.status == EmailStatus.QUEUED:
                    store.move(host, tx, now_row, EmailStatus.SUPERSEDED, {"reason": "can_send"},
                               next_attempt_at_ms=None)
                    store.set_messages(tx, row.email_id, MessageStatus.NOT_SENT)
            host.commit(supersede)
            return False
    return gate is None or await gate.admit(row)


async def _send(transport: Transport, email: OutboundEmail) -> TransportOutcome:
    try:
        return await transport.send(email)
    except Exception:  # the body may have gone: nothing else is safe to conclude
        return OutcomeUnknown(reason="transport_raised")


async def begin_transport(c: CarrierState, req: BeginTransport) -> TransportLease:
    now = c.host.now_ms()
    if req.source_id is not None:
        row = store.row_by_source(c.sql, req.source_id)
        if row is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no email with this source_id")
        rows = [row] if row.status == EmailStatus.QUEUED else []
        if not rows:
            return TransportLease(email=None, receipt=store.receipt(c.sql, row))
    else:
        rows = [r for r, _ in c.fresh.due(c.sql, now, 1)]
        if not rows:
            return TransportLease(email=None)
    email = await _prepare(c, rows[0], lease_ms=req.lease_ms)
    after = store.row_by_seq(c.sql, rows[0].seq)
    if after is None:  # erased meanwhile
        return TransportLease(email=None)
    return TransportLease(email=email, lease_until_ms=after.lease_until_ms if email else None,
                          receipt=store.receipt(c.sql, after))


def record_transport_outcome(c: CarrierState, req: RecordTransportOutcome) -> Receipt:
    def run(tx: SqlStorage) -> Receipt:
        row = store.row_by_id(tx, req.email_id)
        if row is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no email with this email_id")
        if row.status != EmailStatus.DISPATCHING or row.lease_until_ms is None:
            raise MailboxActorsError(
                ErrorCode.CONFLICT, f"the email is {row.status.value}, not leased to a "
                "dispatcher: its outcome cannot be recorded now (resolve settles outcome_unknown)",
                details={"status": row.status.value})
        done = dispatch_rows.record(c.host, tx, row, req.outcome,
                                    c.settings.unreachable_window_ms)
        if done is None:  # the status was read as dispatching in this transaction: cannot be
            raise RuntimeError("a leased email's outcome was not recorded")
        return store.receipt(tx, done)
    return c.host.commit(run)
