"""Where a node's outbox events go (EV-2): the control database's event_index, then the webhooks
queue, one message per event.

Outbox alarms of many actors publish at once under load; this sink groups whatever is waiting into
one control-database write and one queue write (group commit), so dispatch costs two writes per
group, not per event. ``publish`` returns only when its events are durable in both places; if
either write fails, every publisher in the group sees the error and its outbox alarm retries
(delivery is at least once; consumers deduplicate on the event id). DomainMonitor events also move
their domain's row to the state they carry (DM-4), between the two.

When the control data and the queues are one PostgreSQL database (CL-14), the index rows, the
domain states and the queue messages are written in ONE transaction: the outbox marks its events
dispatched only after it commits, so an event is either in the index and on the queue, or in
neither and dispatched again.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.group_commit import GroupCommit
from mailbox_actors.platform.queues import QueueService
from mailbox_actors.platform.shared_store import Tx
from mailbox_actors.wire.control import DomainStateChange, EventIndexRow
from mailbox_actors.wire.domain import DOMAIN_STATES
from mailbox_actors.wire.events import Event, WebhookMessage

__all__ = ["DOMAIN_NAMESPACE", "WEBHOOKS_QUEUE", "ControlEventSink", "domain_states"]

WEBHOOKS_QUEUE = "webhooks"
DOMAIN_NAMESPACE = "domain_monitor"
_MAX_GROUP = 500


class ControlEventSink:
    def __init__(self, control_db: ControlDb, queues: QueueService) -> None:
        self._db = control_db
        self._queues = queues
        self._joint = queues.shares_transactions_with(control_db.store)
        self._groups: GroupCommit[tuple[str, str, Event]] = GroupCommit(
            self._write, max_items=_MAX_GROUP)

    async def publish(self, namespace: str, object_id: str, events: Sequence[Event]) -> None:
        if events:
            await self._groups.submit((namespace, object_id, e) for e in events)

    async def _write(self, items: list[tuple[str, str, Event]]) -> None:
        rows = [EventIndexRow(event_id=e.id, tenant_id=e.tenant_id, identity_id=e.identity_id,
                              namespace=ns, object_id=oid, sequence=e.sequence, type=e.type,
                              occurred_at_ms=e.occurred_at_ms) for ns, oid, e in items]
        bodies = [msgspec.to_builtins(WebhookMessage(tenant_id=e.tenant_id, namespace=ns,
                                                     object_id=oid, event=e))
                  for ns, oid, e in items]
        states = domain_states(items)
        joint = self._db.index_with_clause(rows) if self._joint and not states and \
            len(bodies) <= _MAX_GROUP else None
        if joint is not None:  # one statement: the index's lock, its rows, the messages
            await self._queues.send_batch(WEBHOOKS_QUEUE, bodies, with_clause=joint)
            return
        if self._joint:
            async def index(tx: Tx) -> None:
                await self._db.index_events_in(tx, rows, count=False)
                if states:
                    await self._db.set_domain_states_in(tx, states)

            await self._queues.send_batch(WEBHOOKS_QUEUE, bodies, also=index)
            return
        # The index first, then the queue (EV-2): an event a receiver is sent is always in the
        # index already. Both are idempotent for the outbox's retry: the index ignores a row it
        # has, a second queue message is a duplicate receivers drop.
        await self._db.index_events(rows)
        if states:
            await self._db.set_domain_states(states)
        await self._queues.send_batch(WEBHOOKS_QUEUE, bodies)


def domain_states(items: Sequence[tuple[str, str, Event]]) -> list[DomainStateChange]:
    """DM-4: the domains row follows its DomainMonitor. Objects do not write the control database;
    the monitor's events (each carrying its new ``state``) reach it here, at least once and in
    each monitor's order, and the row keeps the newest sequence it saw."""
    return [DomainStateChange(monitor_id=oid, state=e.data["state"], sequence=e.sequence,
                              occurred_at_ms=e.occurred_at_ms)
            for ns, oid, e in items
            if ns == DOMAIN_NAMESPACE and e.type.startswith("domain.")
            and e.data.get("state") in DOMAIN_STATES]
