"""Queues and events for an operator (UI-3): the dead letters of a queue, paged, with why they were
given up on and after how many attempts; their redrive (sent back to their queue as new messages);
and a tenant's events from the control database's event index, paged by a cursor a follower keeps
asking with (``events tail``).

The queues and the control database are the cluster's, shared by every node, so any node answers.
Cursors are ``core.cursors``' (signed, this listing's own). Events carry ids and types, never data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mailbox_actors.core.cursors import CursorCodec
from mailbox_actors.node.inspection import check_limit
from mailbox_actors.platform.queues.bodies import check_queue_name
from mailbox_actors.webhooks.publish import WEBHOOKS_QUEUE
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.inspection import (
    DeadLetter,
    DeadLettersPage,
    EventsPage,
    IndexedEvent,
    Redriven,
    RedriveReply,
)

if TYPE_CHECKING:
    from mailbox_actors.node.node import Node

__all__ = ["MAX_REDRIVE", "QueueInspector"]

MAX_REDRIVE = 1_000  # letters one redrive moves at most (one transaction)
_ID_MAX = 64


class QueueInspector:
    """Dead letters, redrive and the event index of the cluster a node belongs to."""

    def __init__(self, node: Node, cursors: CursorCodec) -> None:
        self._queues = node.queues
        self._control = node.control_db
        self.cursors = cursors

    def _need(self) -> tuple[Any, Any]:
        if self._queues is None or self._control is None:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST,
                                     "this node has no control database nor queues",
                                     details={"field": "node"})
        return self._queues, self._control

    async def dead_letters(self, queue: str, *, cursor: str | None = None,
                           limit: int | None = None) -> DeadLettersPage:
        queues, _ = self._need()
        _check_queue(queue)
        n = check_limit(limit)
        position = self.cursors.read(cursor, "dead_letters", queue)
        after = 0
        if position is not None:
            if len(position) != 1 or not isinstance(position[0], int) or position[0] < 0:
                raise InvalidRequest("cursor position is malformed", details={"field": "cursor"})
            after = position[0]
        rows = await queues.dead_letter_page(queue, after_seq=after, limit=n + 1)
        page = rows[:n]
        nxt = (self.cursors.make("dead_letters", queue, [page[-1]["seq"]])
               if len(rows) > n else None)
        return DeadLettersPage(queue=queue, next_cursor=nxt, dead_letters=[DeadLetter(
            queue=r["queue"], message_id=r["message_id"], dead_letter_queue=r["dead_letter_queue"],
            kind=r["kind"], reason=r["reason"], attempts=_attempts(r),
            enqueued_at_ms=r["enqueued_at_ms"], recorded_at_ms=r["recorded_at_ms"],
            body=r["body"] if isinstance(r["body"], dict) else {}) for r in page])

    async def redrive(self, queue: str, message_ids: Sequence[str] | None = None, *,
                      limit: int = 100) -> RedriveReply:
        """Send the named letters (or the oldest ``limit``) back to ``queue``."""
        queues, _ = self._need()
        _check_queue(queue)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_REDRIVE:
            raise InvalidRequest(f"limit must be an integer 1..{MAX_REDRIVE}",
                                 details={"field": "limit"})
        if message_ids is not None:
            if not 1 <= len(message_ids) <= MAX_REDRIVE or not all(
                    isinstance(m, str) and 0 < len(m) <= _ID_MAX for m in message_ids):
                raise InvalidRequest(f"message_ids must be 1..{MAX_REDRIVE} message ids",
                                     details={"field": "message_ids"})
        # A webhook counts its own attempts in its body: a redriven one starts again at the first.
        moved = await queues.redrive(queue, message_ids, limit=limit,
                                     restart_keys=("attempt",) if queue == WEBHOOKS_QUEUE else ())
        return RedriveReply(queue=queue, redriven=[Redriven(message_id=old, new_message_id=new)
                                                   for old, new in moved])

    async def events(self, tenant: str, *, cursor: str | None = None,
                     limit: int | None = None) -> EventsPage:
        """A tenant's (by id or name) indexed events after ``cursor``, in index order."""
        _, control = self._need()
        if not isinstance(tenant, str) or not 0 < len(tenant) <= 200:
            raise InvalidRequest("tenant must be a tenant's id or name", details={"field": "tenant"})
        found = await control.find_tenant(tenant)
        if found is None:
            raise MailboxActorsError(ErrorCode.TENANT_NOT_FOUND, "no tenant has this id or name",
                                     details={"field": "tenant"})
        n = check_limit(limit)
        position = self.cursors.read(cursor, "events", found.id)
        after = None
        if position is not None:
            if len(position) != 1 or not isinstance(position[0], str):
                raise InvalidRequest("cursor position is malformed", details={"field": "cursor"})
            after = position[0]
        rows = await control.events(found.id, after_event_id=after, limit=n)
        events = [IndexedEvent(event_id=r.event_id, tenant_id=r.tenant_id,
                               identity_id=r.identity_id, namespace=r.namespace,
                               object_id=r.object_id, sequence=r.sequence, type=r.type,
                               occurred_at_ms=r.occurred_at_ms) for r in rows]
        nxt = (self.cursors.make("events", found.id, [events[-1].event_id]) if events
               else cursor or None)
        return EventsPage(tenant_id=found.id, events=events, next_cursor=nxt)


def _attempts(record: dict[str, Any]) -> int:
    """A letter's attempts: the queue's deliveries, or, for a consumer that retries by sending a
    copy with its own count (a webhook's ``attempt``: the attempts before this copy's), that
    count and this copy's when larger."""
    body = record["body"]
    own = body.get("attempt") if isinstance(body, dict) else None
    n = int(record["attempts"])
    return max(n, own + 1) if isinstance(own, int) and not isinstance(own, bool) else n


def _check_queue(queue: str) -> None:
    try:
        check_queue_name(queue)
    except MailboxActorsError as e:
        raise InvalidRequest(e.message, details={"field": "queue"}) from None
