"""The control database's schema (Q-3) as ordered migrations; ``meta.schema_version`` counts those
applied. Never edit a migration that has shipped; append one."""

from __future__ import annotations

__all__ = ["META", "MIGRATIONS"]

# Ordered; position i (from 1) is schema version i. Append only: never edit a released migration.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE tenants (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            events_days INTEGER NOT NULL,
            webhook_url TEXT,
            webhook_secret TEXT,
            created_at_ms INTEGER NOT NULL,
            status TEXT NOT NULL DEFAULT 'active'
        ) WITHOUT ROWID""",
        """CREATE TABLE identities (
            id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL REFERENCES tenants (id),
            name TEXT NOT NULL,
            mailbox_id TEXT NOT NULL UNIQUE,
            status TEXT NOT NULL CHECK (status IN ('creating', 'active', 'erased')),
            created_at_ms INTEGER NOT NULL,
            UNIQUE (tenant_id, name)
        ) WITHOUT ROWID""",
        """CREATE TABLE domains (
            id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL REFERENCES tenants (id),
            name TEXT NOT NULL UNIQUE,
            monitor_id TEXT NOT NULL UNIQUE,
            created_at_ms INTEGER NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX domains_by_tenant ON domains (tenant_id, id)",
        """CREATE TABLE event_index (
            event_id TEXT PRIMARY KEY,
            tenant_id TEXT NOT NULL,
            identity_id TEXT,
            namespace TEXT NOT NULL,
            object_id TEXT NOT NULL,
            sequence INTEGER NOT NULL,
            type TEXT NOT NULL,
            occurred_at_ms INTEGER NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX event_index_by_tenant ON event_index (tenant_id, event_id)",
    ),
    (
        # 2: the order events were indexed in, for a paging cursor that never passes an event
        # indexed late (an outbox retry indexes an older event id after newer ones).
        """CREATE TABLE event_index_v2 (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id TEXT NOT NULL UNIQUE,
            tenant_id TEXT NOT NULL,
            identity_id TEXT,
            namespace TEXT NOT NULL,
            object_id TEXT NOT NULL,
            sequence INTEGER NOT NULL,
            type TEXT NOT NULL,
            occurred_at_ms INTEGER NOT NULL
        )""",
        "INSERT INTO event_index_v2 (event_id, tenant_id, identity_id, namespace, object_id, "
        "sequence, type, occurred_at_ms) SELECT event_id, tenant_id, identity_id, namespace, "
        "object_id, sequence, type, occurred_at_ms FROM event_index ORDER BY event_id",
        "DROP TABLE event_index",
        "ALTER TABLE event_index_v2 RENAME TO event_index",
        "CREATE INDEX event_index_by_tenant ON event_index (tenant_id, seq)",
    ),
    (
        # 3: a domain's state follows its DomainMonitor's events (DM-4); state_seq is the event
        # sequence it came from, so an outbox retry of an older event never moves it back.
        "ALTER TABLE domains ADD COLUMN state TEXT NOT NULL DEFAULT 'pending'",
        "ALTER TABLE domains ADD COLUMN state_seq INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE domains ADD COLUMN state_at_ms INTEGER",
    ),
    (
        # 4: identities' addresses, for the SMTP door (IN-5); one identity per address.
        """CREATE TABLE addresses (
            address TEXT PRIMARY KEY,
            identity_id TEXT NOT NULL REFERENCES identities (id),
            created_at_ms INTEGER NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX addresses_by_identity ON addresses (identity_id)",
    ),
    (
        # 5: a count of changes to what resolves an address (IN-5): the SMTP door keeps the
        # addresses it resolved while the count stands, in every process sharing the file.
        "CREATE TABLE address_epoch (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL)",
        "INSERT INTO address_epoch (id, n) VALUES (1, 0)",
        *(f"CREATE TRIGGER address_epoch_{table}_{event.lower()} AFTER {event} ON {table} "
          "BEGIN UPDATE address_epoch SET n = n + 1 WHERE id = 1; END"
          for table in ("addresses", "identities") for event in ("INSERT", "UPDATE", "DELETE")),
    ),
)

META = "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID"
