"""The queue database's schema (Q-1) as ordered migrations; ``PRAGMA user_version`` counts those applied.

One file holds every queue of a cluster. A message row is in one of three states, told apart by two
columns: ready (``visible_at_ms <= now``), delayed (later, ``lease`` NULL) and in flight (later,
``lease`` set: a consumer holds it until ``visible_at_ms``, then it is ready again). Never edit a
migration that has shipped; append one.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # seq orders delivery (oldest first) and keeps claims cheap; id is the public qm_ id.
        # origin_queue, reason and failed_attempts are set when a message is moved to a
        # dead-letter queue, for the dead-letter consumer to record.
        """CREATE TABLE messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            queue TEXT NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            enqueued_at_ms INTEGER NOT NULL,
            visible_at_ms INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            lease TEXT,
            origin_queue TEXT,
            reason TEXT,
            failed_attempts INTEGER
        ) STRICT""",
        "CREATE INDEX messages_visible ON messages (queue, visible_at_ms)",
        """CREATE TABLE dead_letters (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            queue TEXT NOT NULL,
            dead_letter_queue TEXT NOT NULL,
            message_id TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            reason TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            enqueued_at_ms INTEGER NOT NULL,
            recorded_at_ms INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX dead_letters_queue ON dead_letters (queue, seq)",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)
