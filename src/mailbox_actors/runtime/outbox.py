"""The transactional outbox (EV-1..EV-5): events leave an actor at least once and are never lost.

``append`` runs inside the state-change transaction (the context's ``emit``, which then lowers
the alarm to now): it bumps ``meta.event_seq``, records ``alarm:outbox`` for now (one write)
and stores the event in the actor's ``outbox`` table undispatched. The outbox alarm
publishes the undispatched events through the node's ``EventSink`` (index in the control database,
one ``webhooks`` queue message per event) and only then marks them dispatched: a crash between any
two steps repeats the step, and consumers deduplicate on the event id.

Events are marked dispatched in sequence order, a prefix at a time, so the undispatched ones are
always the newest: the outbox finds them from the first undispatched sequence, which it keeps in
memory per connection (read again after any rollback), instead of an index on ``dispatched_at``.
The ``outbox`` table is the runtime's, in every actor's file (``opening.OUTBOX_TABLE``, made and
upgraded with the runtime schema, not by the object's migrations): keyed by the sequence alone,
with no index on the event id (ids are unique by construction and never looked up), so an event
writes one b-tree page.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import msgspec

from mailbox_actors.core.alarm_purposes import meta_key
from mailbox_actors.core.durations import DAY_MS
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage, runtime_statement
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import InvalidRequest, LimitExceeded, MailboxActorsError
from mailbox_actors.wire.events import Event, EventsReply

__all__ = ["DEFAULT_EVENTS_DAYS", "OUTBOX_BATCH", "OUTBOX_PURPOSE", "PRUNE_PURPOSE",
           "RUNTIME_PURPOSES", "EventSink",
           "EventsDays", "RecordingEventSink", "RetentionSource", "append", "check_event_data",
           "dispatch", "has_undispatched", "mark_dispatched", "prune", "prune_due", "prune_later",
           "read_events", "retention_days"]

OUTBOX_PURPOSE = "outbox"  # the runtime's own alarm purpose: publish undispatched events
_OUTBOX_KEY = meta_key(OUTBOX_PURPOSE)
# The runtime's other purpose: daily, while dispatched events are kept, delete those past the
# tenant's events_days (EV-4). Recorded by the outbox run that marks events dispatched.
PRUNE_PURPOSE = "outbox_prune"
_PRUNE_KEY = meta_key(PRUNE_PURPOSE)
RUNTIME_PURPOSES = (OUTBOX_PURPOSE, PRUNE_PURPOSE)  # run by the runtime, never by an object
PRUNE_EVERY_MS = DAY_MS

OUTBOX_BATCH = 200
# Publishes one outbox run makes in a row for events appended while it published, before its
# closing commit marks them all (``dispatch``).
_CATCH_UP = 8
DEFAULT_EVENTS_DAYS = 30  # a tenant the control database does not know (embedded use)
_MAX_DATA_BYTES = 4096
_FORBIDDEN_KEYS = frozenset({"body", "text", "html", "subject", "content", "attachment",
                             "attachments", "raw", "headers", "from", "to", "cc", "bcc",
                             "address", "email"})
_NESTED = (dict, list)  # a tuple, not ``dict | list``: that would build a union at every check
_ENC = msgspec.json.Encoder()
_DEC = msgspec.json.Decoder(Event)


class EventSink(Protocol):
    """Where dispatched events go: the control database's event_index and the webhooks queue."""

    async def publish(self, namespace: str, object_id: str, events: Sequence[Event]) -> None: ...


# tenant id -> its events_days from the control database (None: unknown, use the default)
EventsDays = Callable[[str], Awaitable[int | None]]


class RetentionSource(Protocol):
    """What ``retention_days`` asks: the actor context, for its tenant."""

    async def tenant_events_days(self) -> int | None: ...


class RecordingEventSink:
    """For embedded use and tests: keeps every published event in memory, in order."""

    def __init__(self) -> None:
        self.published: list[tuple[str, str, Event]] = []

    async def publish(self, namespace: str, object_id: str, events: Sequence[Event]) -> None:
        self.published.extend((namespace, object_id, e) for e in events)

    def events(self, type_prefix: str = "") -> list[Event]:
        return [e for _, _, e in self.published if e.type.startswith(type_prefix)]


def check_event_data(data: dict[str, Any]) -> None:
    """EV-5: event data is ids, counts and flags; never content or addresses."""
    if len(_ENC.encode(data)) > _MAX_DATA_BYTES:
        raise LimitExceeded("event_data_bytes", _MAX_DATA_BYTES, "event data over 4 KB")
    for k, v in data.items():
        if k.lower() in _FORBIDDEN_KEYS:
            raise InvalidRequest(f"event data may not carry {k!r}: events carry ids only",
                                 details={"field": k})
        if isinstance(v, str):
            if "@" in v or len(v) > 256:
                raise InvalidRequest(f"event data field {k!r} looks like content or an address",
                                     details={"field": k})
        elif isinstance(v, _NESTED):
            raise InvalidRequest(f"event data field {k!r} must be a string, number, bool or null",
                                 details={"field": k})


_INSERT = runtime_statement("INSERT INTO outbox (sequence, id, type, occurred_at_ms, body) "
                            "VALUES (?, ?, ?, ?, ?)")


def append(tx: SqlStorage, storage: RuntimeStorage, *, event_id: str, tenant_id: str,
           identity_id: str | None, type_: str, data: dict[str, Any]) -> Event:
    """Inside the state-change transaction: append the event and record the outbox purpose
    for now (the caller lowers the alarm to it)."""
    if not tx.in_transaction:
        raise RuntimeError("emit must run inside transaction_sync, with the state change")
    check_event_data(data)
    now = tx.now_ms()
    # The sequence and the outbox purpose (due now) in one write; the caller lowers the
    # alarm to it (``purposes.lower_alarm``). Both roll back with the state change. A purpose
    # already recorded for no later than now stands for this event too (the run it makes
    # publishes every undispatched event, and clears the purpose only when none is left).
    due = storage.known_meta(_OUTBOX_KEY)
    if due is not None and int(due) <= now:
        seq = storage.bump_meta("event_seq")
    else:
        seq = storage.bump_meta("event_seq", _OUTBOX_KEY, str(now))
    event = Event(id=event_id, type=type_, sequence=seq, tenant_id=tenant_id,
                  identity_id=identity_id, occurred_at_ms=now, data=data)
    body = _ENC.encode(event)
    storage.run(_INSERT, (seq, event_id, type_, now, body))
    # What the drain (dispatch, has_undispatched) knows without a read.
    known = tx._known_now()
    known.last = seq
    unsent = known.unsent
    if unsent is not None:
        if len(unsent) < _UNSENT_KEPT:
            unsent.append((seq, body))
        else:
            known.unsent = None  # read from the file until a marking leaves none undispatched
    return event


# Kept in memory per connection (``Known``: all of it forgotten at any rollback): a sequence at
# or below the first undispatched event, the sequence the last append took, and every
# undispatched event's (sequence, body) in order, learnt from a marking that left nothing
# undispatched and followed by each append, so the outbox run publishes without reading its
# events back; dropped past _UNSENT_KEPT events.
_UNSENT_KEPT = OUTBOX_BATCH


def _undispatched(sql: SqlStorage, first: int) -> list[tuple[int, bytes]]:
    """Up to OUTBOX_BATCH undispatched events from ``first``, oldest first."""
    unsent = sql._known_now().unsent
    if unsent is not None:
        return [e for e in unsent if e[0] >= first][:OUTBOX_BATCH]
    return [(int(r[0]), r[1]) for r in sql.exec(
        "SELECT sequence, body FROM outbox WHERE sequence >= ? AND dispatched_at IS NULL "
        "ORDER BY sequence LIMIT ?", first, OUTBOX_BATCH).all()]


def _first_undispatched(sql: SqlStorage) -> int:
    """A sequence no undispatched event is below. Known from the last marking on this connection
    while nothing was rolled back since (a marking undone would leave events below it); read
    otherwise: one past the newest dispatched event, found from the end (the undispatched are
    the newest, so the scan crosses only them)."""
    known = sql._known_now()
    if known.first is not None:
        return known.first
    rows = sql.exec("SELECT sequence FROM outbox WHERE dispatched_at IS NOT NULL "
                    "ORDER BY sequence DESC LIMIT 1").all()
    first = int(rows[0][0]) + 1 if rows else 0
    known.first = first
    return first


async def dispatch(sql: SqlStorage, sink: EventSink, namespace: str, object_id: str, *,
                   leave_last: bool = False) -> int | None:
    """The outbox alarm: publish undispatched events in order, then mark them dispatched; in
    batches until none is left.

    ``leave_last``: the last batch is published but not marked; its last sequence is returned
    for the caller to mark (``mark_dispatched``) in the transaction that ends its alarm run, so
    a run costs one commit, not two. Events appended while it published (requests commit during
    the publish's await) are published in the same run, still unmarked, up to ``_CATCH_UP``
    publishes while fewer than ``OUTBOX_BATCH`` are unmarked (the last read may take a batch
    more: at most ``2 * OUTBOX_BATCH - 1`` unmarked), so a steady stream of events costs one
    closing commit a few publishes, not one a publish, each of them with a run of its own after
    it. A crash before that commit publishes those events again (EV-3: at least once; consumers
    deduplicate on the event id)."""
    if sql.async_open:
        # Another task's ctx.transaction (RT-16) may have appended events it has not committed:
        # what the connection knows of the outbox includes them, and a read of the file is
        # refused (review s23 R9). Refused here too (review R10: a run that awaited before its
        # outbox, an override's own await, published such an event): the run is retried, as
        # its closing commit would be refused (daa31c7).
        sql._refuse_outsider()
    first = _first_undispatched(sql)
    unmarked = rounds = rows_last = 0
    while True:
        rows = _undispatched(sql, first)
        if not rows:
            return rows_last if unmarked else None
        try:
            await sink.publish(namespace, object_id, [_DEC.decode(r[1]) for r in rows])
        except BaseException:
            # The sink is down: the retries read from the file, so an actor left open by its
            # outbox's retries does not also keep every event body emitted meanwhile.
            sql._known_now().unsent = None
            raise
        rows_last = rows[-1][0]
        first = rows_last + 1
        unmarked += len(rows)
        rounds += 1
        if leave_last and unmarked < OUTBOX_BATCH:
            # Not while another task's ctx.transaction is open (RT-16): what it appended is
            # not committed, and may roll back (review s23 R4: a phantom event, its sequence
            # given again to the next).
            if rounds < _CATCH_UP and not sql.async_open and _appended_after(sql, rows_last):
                continue  # appended meanwhile: published now, marked with the rest
            return rows_last
        sql.transaction_sync(functools.partial(mark_dispatched, rows_last))
        unmarked = 0
        if len(rows) < OUTBOX_BATCH:
            return None


def mark_dispatched(last: int, tx: SqlStorage) -> None:
    """Inside a transaction: every undispatched event up to sequence ``last`` was published."""
    tx.exec("UPDATE outbox SET dispatched_at = ? WHERE sequence >= ? AND sequence <= ? AND "
            "dispatched_at IS NULL", tx.now_ms(), _first_undispatched(tx), last)
    # Should this transaction roll back, the rollback empties what is known, this with it.
    known = tx._known_now()
    first = max(last + 1, _first_undispatched(tx))
    known.first = first
    unsent = known.unsent
    if unsent is not None:
        unsent[:] = [e for e in unsent if e[0] >= first]
    elif known.last is not None and known.last < first:
        known.unsent = []  # nothing is undispatched: follow the appends now


async def retention_days(ctx: RetentionSource) -> int | None:
    """How many days of events the actor's tenant keeps (EV-4), or None when the control
    database cannot say now: then maintenance keeps every event this time."""
    try:
        return await ctx.tenant_events_days() or DEFAULT_EVENTS_DAYS
    except MailboxActorsError:
        return None


def prune(tx: SqlStorage, days: int | None) -> None:
    """EV-4: delete dispatched events older than ``days``; undispatched ones still go out."""
    if days is not None:
        tx.exec("DELETE FROM outbox WHERE dispatched_at IS NOT NULL AND occurred_at_ms < ?",
                tx.now_ms() - days * DAY_MS)


def prune_later(storage: RuntimeStorage, now_ms: int) -> None:
    """Inside a transaction (the outbox run's closing one, or an upgrade's): record the prune
    purpose a day from now unless it is recorded already. The runs' re-arm points the alarm at
    it (``purposes.rearm``); only its first recording writes."""
    if _PRUNE_KEY not in storage.meta_range("alarm:", "alarm;"):  # known: no read
        storage.put_meta(_PRUNE_KEY, str(now_ms + PRUNE_EVERY_MS))


async def prune_due(storage: RuntimeStorage, tenant: RetentionSource) -> None:
    """The prune purpose's run (EV-4): dispatched events past the tenant's events_days go; it is
    recorded again for a day later while dispatched events are left (also when the control
    database cannot say how many days to keep now: then every event is kept this time)."""
    days = await retention_days(tenant)

    def run(tx: SqlStorage) -> None:
        prune(tx, days)
        if tx.exec("SELECT 1 FROM outbox WHERE dispatched_at IS NOT NULL LIMIT 1").all():
            storage.put_meta(_PRUNE_KEY, str(tx.now_ms() + PRUNE_EVERY_MS))

    storage.sql.transaction_sync(run)


def _appended_after(sql: SqlStorage, sequence: int) -> bool:
    """Whether an event after ``sequence`` (published, not yet marked) was appended: known
    without a read while this connection appended the newest event (``has_undispatched``)."""
    last = sql._known_now().last
    if last is not None:
        return last > sequence
    return bool(sql.exec("SELECT 1 FROM outbox WHERE sequence > ? LIMIT 1", sequence).all())


def has_undispatched(sql: SqlStorage) -> bool:
    """Whether an event is still to be published. Dispatched events are a prefix, so while this
    connection appended the newest event and nothing was rolled back since, the answer is
    whether that event is at or past the first undispatched sequence, without a read (the
    outbox run asks it in every closing commit); otherwise it is read."""
    last = sql._known_now().last
    if last is not None:
        return last >= _first_undispatched(sql)
    return bool(sql.exec("SELECT 1 FROM outbox WHERE sequence >= ? AND dispatched_at IS NULL "
                         "LIMIT 1", _first_undispatched(sql)).all())


def read_events(sql: SqlStorage, after_sequence: int, limit: int) -> EventsReply:
    """EV-4: events after ``after_sequence`` in sequence order, for replay."""
    rows = sql.exec("SELECT sequence, body FROM outbox WHERE sequence > ? ORDER BY sequence "
                    "LIMIT ?", after_sequence, limit + 1).all()
    more = len(rows) > limit
    events = [_DEC.decode(r[1]) for r in rows[:limit]]
    return EventsReply(events=events,
                       next_after_sequence=events[-1].sequence if more and events else None)
