"""Post's tables and statements on SQLite (actor files and the control database), PO-2 and PO-8.

Post owns three tables, all prefixed ``post_`` (the runtime keeps ``_ma_``/``_cf_`` for itself):
``post_envelopes`` (the envelope as sent, and the prepared fact once there is one),
``post_jobs`` (one delivery job per envelope: state, attempts, retry time, dead-letter reason,
receipt; ``seq`` is the producer's order) and, on a receiver, ``post_admitted`` (one row per
admitted key). Producers add ``POST_MIGRATIONS`` to their migrations (``POST_SCHEMA``, then
``POST_RUNS``: the budget's own count and the seed's job id, PO-11 and PO-12), receivers
``POST_RECEIVER_SCHEMA``.
"""

from __future__ import annotations

__all__ = ["ENVELOPE_INSERT", "HEADS", "JOB_INSERT", "PENDING_SQL", "POST_MIGRATIONS",
           "POST_RECEIVER_SCHEMA", "POST_RUNS", "POST_SCHEMA", "POST_TABLES", "SETTLE", "START"]

PENDING_SQL = "('queued', 'running', 'failed')"

POST_SCHEMA = (
    "CREATE TABLE post_envelopes (key TEXT PRIMARY KEY, route TEXT NOT NULL, kind TEXT NOT NULL, "
    "producer TEXT NOT NULL, namespace TEXT NOT NULL, object_name TEXT NOT NULL, tenant_id TEXT, "
    "identity_id TEXT, digest TEXT NOT NULL, address TEXT NOT NULL, event TEXT NOT NULL, "
    "prepared TEXT, created_at_ms INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE post_jobs (seq INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, "
    "address_key TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
    "next_attempt_at_ms INTEGER NOT NULL, lease_until_ms INTEGER, reason TEXT, receipt TEXT, "
    "updated_at_ms INTEGER NOT NULL)",
    "CREATE INDEX post_jobs_by_address ON post_jobs (address_key, seq)",
    f"CREATE INDEX post_jobs_pending ON post_jobs (address_key, seq) WHERE state IN {PENDING_SQL}",
)

# A later migration (PO-12): ``attempts`` counts receiver invocations only; ``runs`` counts the
# executor's tries (a failed preparation too) and is what the retry budget spends. ``job_id`` is
# the id a ``send_from_select`` row names for its job (PO-11), NULL otherwise.
POST_RUNS = (
    "ALTER TABLE post_jobs ADD COLUMN runs INTEGER NOT NULL DEFAULT 0",
    "UPDATE post_jobs SET runs = attempts",
    "ALTER TABLE post_jobs ADD COLUMN job_id TEXT",
)

# Each one migration of a producer's, in order.
POST_MIGRATIONS = (POST_SCHEMA, POST_RUNS)

# The producer's tables as the migrations leave them, readable in one place (a file built from
# POST_MIGRATIONS has exactly this layout: tests/post/test_post_schema.py).
POST_TABLES = (
    POST_SCHEMA[0],
    "CREATE TABLE post_jobs (seq INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, "
    "address_key TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
    "next_attempt_at_ms INTEGER NOT NULL, lease_until_ms INTEGER, reason TEXT, receipt TEXT, "
    "updated_at_ms INTEGER NOT NULL, runs INTEGER NOT NULL DEFAULT 0, job_id TEXT)",
    *POST_SCHEMA[2:],
)

POST_RECEIVER_SCHEMA = (
    "CREATE TABLE post_admitted (key TEXT PRIMARY KEY, producer TEXT NOT NULL, "
    "admitted_at_ms INTEGER NOT NULL, receipt TEXT) WITHOUT ROWID",
)

# A replay with the same key and other content turns the digest NULL: a NOT NULL failure that
# rolls back the statement's whole batch (PO-8); the same content changes nothing.
ENVELOPE_INSERT = (
    "INSERT INTO post_envelopes (key, route, kind, producer, namespace, object_name, tenant_id, "
    "identity_id, digest, address, event, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET digest = CASE WHEN post_envelopes.digest = excluded.digest "
    "THEN post_envelopes.digest ELSE NULL END")
JOB_INSERT = (
    "INSERT INTO post_jobs (seq, key, address_key, state, attempts, next_attempt_at_ms, "
    "updated_at_ms) SELECT coalesce(max(seq), 0) + 1, ?, ?, 'queued', 0, ?, ? FROM post_jobs "
    "WHERE true ON CONFLICT (key) DO NOTHING")

# The first pending job of each address, with the time it is due and its runs.
HEADS = (
    "SELECT j.seq, j.state, j.next_attempt_at_ms, j.lease_until_ms, j.runs, j.address_key "
    "FROM post_jobs j JOIN (SELECT min(seq) AS s FROM post_jobs "
    f"WHERE state IN {PENDING_SQL} GROUP BY address_key) h ON j.seq = h.s")
CHAIN = (
    "SELECT j.seq, j.key, e.route, e.kind, e.producer, e.namespace, e.object_name, e.tenant_id, "
    "e.identity_id, e.address, e.event, e.prepared, j.attempts, j.state, j.next_attempt_at_ms, "
    "j.lease_until_ms, j.runs FROM post_jobs j JOIN post_envelopes e ON e.key = j.key "
    f"WHERE j.address_key = ? AND j.state IN {PENDING_SQL} ORDER BY j.seq LIMIT ?")
# A run starts (PO-12): ``running`` with recovery's lease, one more run, and one more attempt when
# the receiver is called next (bind 1 or 0). Only a pending job starts.
START = ("UPDATE post_jobs SET state = 'running', runs = runs + 1, attempts = attempts + ?, "
         f"lease_until_ms = ?, updated_at_ms = ? WHERE seq = ? AND state IN {PENDING_SQL}")
SETTLE = ("UPDATE post_jobs SET state = ?, next_attempt_at_ms = coalesce(?, next_attempt_at_ms), "
          "reason = ?, receipt = ?, lease_until_ms = NULL, updated_at_ms = ? WHERE seq = ?")
