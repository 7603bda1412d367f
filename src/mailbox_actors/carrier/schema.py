"""Carrier's tables, readable in one place (CA-15): ``SCHEMA`` is the current layout a new store
is created with; ``MIGRATIONS`` are the steps an existing store took to reach it, in order, kept for
files made by earlier code (IdentityMailbox's migrations 4, 7, 8, 10, 11, 12, 16 and 17 run them).
tests/objects/test_mailbox_schema.py checks that replaying them gives ``SCHEMA``'s layout.

An actor that builds a Carrier adds ``SCHEMA`` to one of its migrations. Every table here is the
store's content: ``TABLES`` lists what an erasure empties.
"""

from __future__ import annotations

__all__ = ["CARRIER_FRESH", "CARRIER_INLINE_CONTENT", "CARRIER_LEARNED", "CARRIER_LIVE_INDEXES",
           "CARRIER_MESSAGES_LEAN", "CARRIER_ONE_KEY", "CARRIER_SCHEMA", "CARRIER_UNREACHABLE",
           "MIGRATIONS", "SCHEMA", "TABLES"]

# The Message-IDs providers gave Emails (CA-17), without brackets, by that id: replies and bounces
# quoting one find the Email (``stamped`` is the id it was sent with). Also the last step below.
CARRIER_LEARNED = (
    "CREATE TABLE email_learned_ids (learned TEXT PRIMARY KEY, email_id TEXT NOT NULL UNIQUE, "
    "stamped TEXT NOT NULL) WITHOUT ROWID",
)

# The provider could not be reached (CA-16): since when (the first failure in a row), how often,
# and the last failure's kind and time. Also a step below.
CARRIER_UNREACHABLE = (
    "ALTER TABLE emails ADD COLUMN unreachable_since_ms INTEGER",
    "ALTER TABLE emails ADD COLUMN unreachable_count INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE emails ADD COLUMN failure_kind TEXT",
    "ALTER TABLE emails ADD COLUMN failure_at_ms INTEGER",
)

# The current layout. Emails are keyed by ``seq`` and found by id through their first Message
# (keys.py); a just-submitted Email is ``fresh`` and out of the queued index (fresh.py); content
# up to a chunk's size is inline in the Email's row, larger content in ``email_content``.
SCHEMA = (
    "CREATE TABLE emails (seq INTEGER PRIMARY KEY, email_id TEXT NOT NULL, "
    "source_id TEXT NOT NULL UNIQUE, digest TEXT NOT NULL, status TEXT NOT NULL, "
    "message_id_header TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
    "provider_message_id TEXT, rejection_code TEXT, rejection_class TEXT, "
    "next_attempt_at_ms INTEGER, send_before INTEGER, lease_until_ms INTEGER, resolution TEXT, "
    "created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL, content BLOB, "
    "content_parts INTEGER NOT NULL DEFAULT 0, fresh INTEGER, unreachable_since_ms INTEGER, "
    "unreachable_count INTEGER NOT NULL DEFAULT 0, failure_kind TEXT, failure_at_ms INTEGER)",
    "CREATE INDEX emails_queued ON emails (next_attempt_at_ms) "
    "WHERE status = 'queued' AND fresh IS NULL",
    "CREATE INDEX emails_leased ON emails (lease_until_ms) WHERE status = 'dispatching'",
    "CREATE TABLE email_content (email_id TEXT NOT NULL, part INTEGER NOT NULL, "
    "chunk BLOB NOT NULL, PRIMARY KEY (email_id, part)) WITHOUT ROWID",
    "CREATE TABLE email_messages (email_id TEXT NOT NULL, position INTEGER NOT NULL, "
    "message_id TEXT NOT NULL, role TEXT NOT NULL, recipient_key TEXT NOT NULL, "
    "status TEXT NOT NULL, code TEXT, created_at_ms INTEGER NOT NULL, "
    "updated_at_ms INTEGER NOT NULL, email_seq INTEGER NOT NULL DEFAULT 0, "
    "PRIMARY KEY (email_id, position)) WITHOUT ROWID",
    "CREATE INDEX email_messages_recipient ON email_messages (recipient_key, created_at_ms)",
    "CREATE TABLE email_message_ids (message_id TEXT PRIMARY KEY, email_id TEXT NOT NULL, "
    "position INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE delivery_events (dedupe_key TEXT PRIMARY KEY, message_id TEXT NOT NULL, "
    "type TEXT NOT NULL, applied_at_ms INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE email_fresh_from (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL)",
    *CARRIER_LEARNED,
)
# Everything here is the store's content: an erasure empties it (RPC-4).
TABLES = ("emails", "email_content", "email_messages", "email_message_ids", "delivery_events",
          "email_learned_ids")

# ---- how existing stores got there, in order -------------------------------------------------

# The first layout.
CARRIER_SCHEMA = (
    "CREATE TABLE emails (email_id TEXT PRIMARY KEY, source_id TEXT NOT NULL UNIQUE, "
    "digest TEXT NOT NULL, status TEXT NOT NULL, message_id_header TEXT NOT NULL, "
    "attempts INTEGER NOT NULL DEFAULT 0, provider_message_id TEXT, rejection_code TEXT, "
    "rejection_class TEXT, next_attempt_at_ms INTEGER, send_before INTEGER, "
    "lease_until_ms INTEGER, resolution TEXT, created_at_ms INTEGER NOT NULL, "
    "updated_at_ms INTEGER NOT NULL)",
    "CREATE INDEX emails_due ON emails (status, next_attempt_at_ms)",
    "CREATE TABLE email_content (email_id TEXT NOT NULL, part INTEGER NOT NULL, "
    "chunk BLOB NOT NULL, PRIMARY KEY (email_id, part)) WITHOUT ROWID",
    "CREATE TABLE email_messages (message_id TEXT PRIMARY KEY, email_id TEXT NOT NULL, "
    "position INTEGER NOT NULL, role TEXT NOT NULL, recipient_key TEXT NOT NULL, "
    "status TEXT NOT NULL, code TEXT, created_at_ms INTEGER NOT NULL, "
    "updated_at_ms INTEGER NOT NULL)",
    "CREATE INDEX email_messages_email ON email_messages (email_id, position)",
    "CREATE INDEX email_messages_recipient ON email_messages (recipient_key, created_at_ms)",
    "CREATE TABLE delivery_events (dedupe_key TEXT PRIMARY KEY, message_id TEXT NOT NULL, "
    "type TEXT NOT NULL, applied_at_ms INTEGER NOT NULL) WITHOUT ROWID",
)

# Content up to a chunk's size lives in the Email's own row (one write less at submit, none at
# drop); larger content in email_content's chunks, counted by content_parts.
CARRIER_INLINE_CONTENT = (
    "ALTER TABLE emails ADD COLUMN content BLOB",
    "ALTER TABLE emails ADD COLUMN content_parts INTEGER NOT NULL DEFAULT 0",
    "UPDATE emails SET content_parts = (SELECT count(*) FROM email_content c "
    "WHERE c.email_id = emails.email_id)",
)

# The Messages keyed by their Email and position, without a rowid (WITHOUT ROWID: the rows are
# small): one b-tree and two indexes (the message id's, the cap's) where there were a table and
# three, so a Message costs three pages of the commit, not four.
CARRIER_MESSAGES_LEAN = (
    "CREATE TABLE email_messages_lean (email_id TEXT NOT NULL, position INTEGER NOT NULL, "
    "message_id TEXT NOT NULL, role TEXT NOT NULL, recipient_key TEXT NOT NULL, "
    "status TEXT NOT NULL, code TEXT, created_at_ms INTEGER NOT NULL, "
    "updated_at_ms INTEGER NOT NULL, PRIMARY KEY (email_id, position)) WITHOUT ROWID",
    "INSERT INTO email_messages_lean (email_id, position, message_id, role, recipient_key, "
    "status, code, created_at_ms, updated_at_ms) SELECT email_id, position, message_id, role, "
    "recipient_key, status, code, created_at_ms, updated_at_ms FROM email_messages",
    "DROP TABLE email_messages",
    "ALTER TABLE email_messages_lean RENAME TO email_messages",
    "CREATE UNIQUE INDEX email_messages_id ON email_messages (message_id)",
    "CREATE INDEX email_messages_recipient ON email_messages (recipient_key, created_at_ms)",
)

# The rebuild of an existing file (the migration): Messages get their Email's seq (read through
# the old email-id index, before it goes), every stored Message id is listed, then the Emails
# are rebuilt keyed by seq (their rowid kept as seq) without the email-id key.
CARRIER_ONE_KEY = (
    "ALTER TABLE email_messages ADD COLUMN email_seq INTEGER NOT NULL DEFAULT 0",
    "UPDATE email_messages SET email_seq = "
    "(SELECT e.rowid FROM emails e WHERE e.email_id = email_messages.email_id)",
    "CREATE TABLE email_message_ids (message_id TEXT PRIMARY KEY, email_id TEXT NOT NULL, "
    "position INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO email_message_ids (message_id, email_id, position) "
    "SELECT message_id, email_id, position FROM email_messages",
    "DROP INDEX email_messages_id",
    "CREATE TABLE emails_keyed (seq INTEGER PRIMARY KEY, email_id TEXT NOT NULL, "
    "source_id TEXT NOT NULL UNIQUE, digest TEXT NOT NULL, status TEXT NOT NULL, "
    "message_id_header TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
    "provider_message_id TEXT, rejection_code TEXT, rejection_class TEXT, "
    "next_attempt_at_ms INTEGER, send_before INTEGER, lease_until_ms INTEGER, resolution TEXT, "
    "created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL, content BLOB, "
    "content_parts INTEGER NOT NULL DEFAULT 0)",
    "INSERT INTO emails_keyed (seq, email_id, source_id, digest, status, message_id_header, "
    "attempts, provider_message_id, rejection_code, rejection_class, next_attempt_at_ms, "
    "send_before, lease_until_ms, resolution, created_at_ms, updated_at_ms, content, "
    "content_parts) SELECT rowid, email_id, source_id, digest, status, message_id_header, "
    "attempts, provider_message_id, rejection_code, rejection_class, next_attempt_at_ms, "
    "send_before, lease_until_ms, resolution, created_at_ms, updated_at_ms, content, "
    "content_parts FROM emails ORDER BY rowid",
    "DROP TABLE emails",
    "ALTER TABLE emails_keyed RENAME TO emails",
    "CREATE INDEX emails_due ON emails (status, next_attempt_at_ms)",
)

# Dispatch looks Emails up by status only while they are queued (by due time) or dispatching (by
# lease): an index of those two alone, where the due index held every Email by status. It stays
# as small as the work in hand, and an Email's intent and outcome move one entry less each.
CARRIER_LIVE_INDEXES = (
    "DROP INDEX emails_due",
    "CREATE INDEX emails_queued ON emails (next_attempt_at_ms) WHERE status = 'queued'",
    "CREATE INDEX emails_leased ON emails (lease_until_ms) WHERE status = 'dispatching'",
)

CARRIER_FRESH = (
    "ALTER TABLE emails ADD COLUMN fresh INTEGER",
    "DROP INDEX emails_queued",
    "CREATE INDEX emails_queued ON emails (next_attempt_at_ms) "
    "WHERE status = 'queued' AND fresh IS NULL",
    "CREATE TABLE email_fresh_from (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL)",
    # Every Email stored before is in the index (its fresh is NULL): the bound starts past them.
    "INSERT INTO email_fresh_from (id, seq) SELECT 1, coalesce(max(seq), 0) + 1 FROM emails",
)


MIGRATIONS = (CARRIER_SCHEMA, CARRIER_INLINE_CONTENT, CARRIER_MESSAGES_LEAN, CARRIER_ONE_KEY,
              CARRIER_LIVE_INDEXES, CARRIER_FRESH, CARRIER_LEARNED, CARRIER_UNREACHABLE)
