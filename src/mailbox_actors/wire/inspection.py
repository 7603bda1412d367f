"""What operator inspection answers (UI-1): pages of actors, one actor's runtime view, its rows, its
KV and its outbox. Every page carries an opaque ``next_cursor`` (null at the end).

Values read from an actor's tables or KV are JSON-able: numbers, booleans and null as they are;
text and bytes either as they are (content shown) or as a ``Redacted`` description (CA-10: ids,
states, counts and evidence, never bodies or addresses, unless content is asked for where it may be).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "ActorDetail", "ActorSummary", "ActorsPage", "AlarmView", "DeadLetter", "DeadLettersPage",
    "EventsPage", "IndexedEvent", "KvEntry", "KvPage", "NamespaceCount", "NamespacesView",
    "OutboxEvent", "OutboxPage", "PurposeView", "Redacted", "Redrive", "RedriveReply", "Redriven",
    "RowsPage", "TableView",
]


class Redacted(msgspec.Struct, frozen=True, tag="redacted", tag_field="kind"):
    """A text or blob value not shown: its type and size only."""

    type: str  # "text" or "blob"
    bytes: int


class ActorSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One actor in a listing."""

    namespace: str
    id: str
    node: str  # the node that owns it (and holds its file)
    name: str | None = None  # where the control database knows it (identity, tenant, domain)
    tenant: str | None = None  # the stored owner tenant
    file_bytes: int
    active: bool  # its file is open on its node now
    next_alarm_ms: int | None = None
    schema_version: int | None = None


class ActorsPage(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    actors: list[ActorSummary]
    next_cursor: str | None = None


class NamespaceCount(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    actors: int  # files on disk, across the nodes asked
    active: int
    alarms_pending: int
    alarms_overdue: int


class NamespacesView(msgspec.Struct, frozen=True, kw_only=True):
    """Every namespace served, with its counts (the console's overview)."""

    namespaces: list[NamespaceCount]
    nodes: list[str]


class PurposeView(msgspec.Struct, frozen=True, kw_only=True):
    purpose: str
    due_ms: int
    retries: int  # failed runs of the alarm behind it while it is due (0 otherwise)


class AlarmView(msgspec.Struct, frozen=True, kw_only=True):
    at_ms: int | None  # as stored in the actor's file
    retries: int  # failed runs the node counts for it now
    purposes: list[PurposeView]


class TableView(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    rows: int  # counted up to ``ROW_COUNT_CAP``; ``rows_capped`` says there are more
    rows_capped: bool = False
    columns: list[str]


class ActorDetail(msgspec.Struct, frozen=True, kw_only=True):
    """One actor as its file holds it, read without activating it."""

    namespace: str
    id: str
    node: str
    name: str | None = None
    active: bool
    file_bytes: int
    meta: dict[str, Any]  # the runtime's meta (schema_version, owner_tenant, ...), no alarm keys
    alarm: AlarmView
    tables: list[TableView]
    kv_keys: int
    outbox_pending: int
    outbox_dispatched: int


class RowsPage(msgspec.Struct, frozen=True, kw_only=True):
    table: str
    columns: list[str]
    rows: list[list[Any]]
    next_cursor: str | None = None


class KvEntry(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    value: Any  # decoded (RT-15): tuples as lists, datetimes as ISO text, bytes as base64 text
    type: str  # the Python type stored: int, str, tuple, datetime, bytes, ...


class KvPage(msgspec.Struct, frozen=True, kw_only=True):
    entries: list[KvEntry]
    next_cursor: str | None = None


class OutboxEvent(msgspec.Struct, frozen=True, kw_only=True):
    sequence: int
    id: str
    type: str
    occurred_at_ms: int
    dispatched_at_ms: int | None  # null: pending


class OutboxPage(msgspec.Struct, frozen=True, kw_only=True):
    """The outbox newest first (pending events are the newest, EV-2)."""

    events: list[OutboxEvent]
    pending: int
    next_cursor: str | None = None


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """A queue message given up on (UI-3): where it came from, why, after how many attempts."""

    queue: str  # the queue it was sent to (where a redrive sends it back)
    message_id: str
    dead_letter_queue: str
    kind: str
    reason: str
    attempts: int
    enqueued_at_ms: int
    recorded_at_ms: int
    body: dict[str, Any]  # a webhook's event reference (ids and type: events carry no content)


class DeadLettersPage(msgspec.Struct, frozen=True, kw_only=True):
    queue: str
    dead_letters: list[DeadLetter]
    next_cursor: str | None = None


class Redrive(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /admin/queues/{queue}/redrive``: the letters named, or the oldest ``limit``."""

    message_ids: list[str] | None = None
    limit: int = 100


class Redriven(msgspec.Struct, frozen=True, kw_only=True):
    message_id: str  # the dead letter's
    new_message_id: str  # the message sent again


class RedriveReply(msgspec.Struct, frozen=True, kw_only=True):
    queue: str
    redriven: list[Redriven]


class IndexedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event of the control database's event index: ids and type, never data (EV-2)."""

    event_id: str
    tenant_id: str
    identity_id: str | None
    namespace: str
    object_id: str
    sequence: int
    type: str
    occurred_at_ms: int


class EventsPage(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant's indexed events in index order; ``next_cursor`` continues (never null: a
    follower keeps asking with the last one)."""

    tenant_id: str
    events: list[IndexedEvent]
    next_cursor: str | None = None
