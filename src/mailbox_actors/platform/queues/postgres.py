"""The queues on PostgreSQL (CL-7): ``queues_on(db, clock=..., ids=...)`` is a ``QueueService``
whose messages live in ``db`` (a ``PgDatabase`` the control data may share), under the ``queues``
component's schema. Claims take ``FOR UPDATE SKIP LOCKED``, so two processes never hold one
message; a row trigger notifies ``ma_queues`` (the queue's name as payload) whenever a message
becomes visible without a lease (sent, released, retried, dead-lettered), which wakes idle
consumers in every process. Needs the ``postgres`` extra."""

from __future__ import annotations

from typing import Any

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.postgres.database import PgDatabase
from mailbox_actors.platform.postgres.migrations import Schema
from mailbox_actors.platform.postgres.store import PgStore
from mailbox_actors.platform.queues.service import QueueService

__all__ = ["QUEUES", "queues_on"]

# Append only: never edit a released migration.
QUEUES = Schema("queues", (
    (
        "CREATE TABLE messages (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "id text NOT NULL UNIQUE, queue text NOT NULL, kind text NOT NULL, body text NOT NULL, "
        "enqueued_at_ms bigint NOT NULL, visible_at_ms bigint NOT NULL, "
        "attempts integer NOT NULL DEFAULT 0, lease text, origin_queue text, reason text, "
        "failed_attempts integer)",
        "CREATE INDEX messages_visible ON messages (queue, visible_at_ms, seq)",
        "CREATE TABLE dead_letters (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "queue text NOT NULL, dead_letter_queue text NOT NULL, message_id text NOT NULL UNIQUE, "
        "kind text NOT NULL, body text NOT NULL, reason text NOT NULL, attempts integer NOT NULL, "
        "enqueued_at_ms bigint NOT NULL, recorded_at_ms bigint NOT NULL)",
        "CREATE INDEX dead_letters_queue ON dead_letters (queue, seq)",
        # A notification per queue and transaction (PostgreSQL folds identical ones).
        "CREATE FUNCTION ma_queue_visible() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "PERFORM pg_notify('ma_queues', NEW.queue); RETURN NULL; END $$",
        "CREATE TRIGGER messages_visible_notify AFTER INSERT OR UPDATE ON messages "
        "FOR EACH ROW WHEN (NEW.lease IS NULL) EXECUTE FUNCTION ma_queue_visible()",
    ),
    (
        # 2: a queue table is all churn (every claim and ack leaves a dead row version behind in
        # the index claims walk): vacuum it after a thousand of them, not a fifth of the table.
        "ALTER TABLE messages SET (autovacuum_vacuum_scale_factor = 0.0, "
        "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0, "
        "autovacuum_analyze_scale_factor = 0.05)",
    ),
))


def queues_on(db: PgDatabase, *, clock: Clock, ids: Ids, metrics: Any | None = None
              ) -> QueueService:
    return QueueService(PgStore(db, QUEUES, what="queue database"), clock=clock, ids=ids,
                        metrics=metrics)
