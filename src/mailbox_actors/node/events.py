"""Where a node's outbox events go (EV-2): the control database's event_index, then the webhooks
queue, one message per event.

Outbox alarms of many actors publish at once under load; this sink groups whatever is waiting into
one control-database transaction and one queue transaction (group commit), so dispatch costs two
transactions per group, not per event. ``publish`` returns only when its events are durable in
both places; if either write fails, every publisher in the group sees the error and its outbox
alarm retries (delivery is at least once; consumers deduplicate on the event id).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import anyio
import msgspec

from mailbox_actors.platform.control_db import ControlDb
from mailbox_actors.platform.queues import QueueService
from mailbox_actors.wire.control import EventIndexRow
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.events import Event, WebhookMessage

__all__ = ["WEBHOOKS_QUEUE", "ControlEventSink"]

WEBHOOKS_QUEUE = "webhooks"
_MAX_GROUP = 500


class _Group:
    def __init__(self) -> None:
        self.items: list[tuple[str, str, Event]] = []
        self.done = anyio.Event()
        self.error: BaseException | None = None


class ControlEventSink:
    def __init__(self, control_db: ControlDb, queues: QueueService) -> None:
        self._db = control_db
        self._queues = queues
        self._pending: deque[_Group] = deque()  # groups not yet written, oldest first
        self._lock = anyio.Lock()

    async def publish(self, namespace: str, object_id: str, events: Sequence[Event]) -> None:
        if not events:
            return
        if not self._pending or len(self._pending[-1].items) >= _MAX_GROUP:
            self._pending.append(_Group())
        group = self._pending[-1]
        group.items.extend((namespace, object_id, e) for e in events)
        # Whoever holds the lock writes the oldest groups, and stops once its own is written:
        # no publisher waits for more than the groups ahead of it.
        async with self._lock:
            while not group.done.is_set():
                ahead = self._pending.popleft()
                try:
                    await self._write(ahead.items)
                except BaseException as e:
                    ahead.error = e if isinstance(e, Exception) else MailboxActorsError(
                        ErrorCode.UNAVAILABLE, "event publishing was interrupted")
                    if not isinstance(e, Exception):
                        ahead.done.set()
                        raise
                ahead.done.set()
        if group.error is not None:
            raise group.error

    async def _write(self, items: list[tuple[str, str, Event]]) -> None:
        rows = [EventIndexRow(event_id=e.id, tenant_id=e.tenant_id, identity_id=e.identity_id,
                              namespace=ns, object_id=oid, sequence=e.sequence, type=e.type,
                              occurred_at_ms=e.occurred_at_ms) for ns, oid, e in items]
        await self._db.index_events(rows)
        bodies = [msgspec.to_builtins(WebhookMessage(tenant_id=e.tenant_id, namespace=ns,
                                                     object_id=oid, event=e))
                  for ns, oid, e in items]
        await self._queues.send_batch(WEBHOOKS_QUEUE, bodies)
