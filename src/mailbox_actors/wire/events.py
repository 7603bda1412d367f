"""Events (EV-1..EV-5): the envelope every object emits through its outbox, and the replay ops.

Event data carries ids and counts only, never message bodies, subjects or addresses (EV-5).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

__all__ = ["EmitEvent", "Event", "EventsReply", "GetEvents", "WebhookMessage"]

EventType = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z_]{0,31}\.[a-z][a-z_]{0,63}$(?!\n)",
                                        description="namespace-ish prefix and a name")]


class Event(msgspec.Struct, kw_only=True):
    """``{id:"evt_...", type, sequence, tenant_id, identity_id, occurred_at_ms, data}``."""

    id: str
    type: str
    sequence: int
    tenant_id: str
    identity_id: str | None = None
    occurred_at_ms: int
    data: dict[str, Any] = {}


class GetEvents(msgspec.Struct, tag="get_events", tag_field="op", forbid_unknown_fields=True):
    """Replay: events with sequence > after_sequence, in order (EV-4)."""

    after_sequence: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100


class EmitEvent(msgspec.Struct, tag="emit_event", tag_field="op", forbid_unknown_fields=True):
    """An ``identity.*`` event written after a control-database change."""

    type: EventType
    data: dict[str, str | int | bool | None] = {}


class EventsReply(msgspec.Struct):
    events: list[Event]
    next_after_sequence: int | None


class WebhookMessage(msgspec.Struct, kw_only=True):
    """The ``webhooks`` queue body: one event for one tenant (ids and pointers only)."""

    v: int = 1
    kind: str = "webhook_event"
    tenant_id: str
    namespace: str
    object_id: str
    event: Event
