"""IdentityMailbox's current schema, readable in one place (OBJ-1): every table and index of the
mailbox's own in a mailbox file today, by concern (the runtime's tables, the outbox among them, are
``platform/storage/opening.RUNTIME_TABLES``). The ordered migrations that built existing files stay on the
class (``actor.IdentityMailbox.migrations``); tests/objects/test_mailbox_schema.py checks that
replaying them gives exactly this layout, so a migration added without updating this file (or the
reverse) fails there.
"""

from __future__ import annotations

from mailbox_actors import carrier
from mailbox_actors.objects.identity_mailbox.search import SEARCH_SCHEMA
from mailbox_actors.objects.identity_mailbox.sources import RAW_SCHEMA
from mailbox_actors.objects.identity_mailbox.waits import WAITS_SCHEMA
from mailbox_actors.objects.shared_schema import RATE_WINDOWS_SCHEMA
from mailbox_actors.post.sql import POST_TABLES
from mailbox_actors.runtime.migrations import PLATFORM_META

__all__ = ["INBOUND", "LIFECYCLE", "SCHEMA"]

# The identity, its idempotency records and rate windows, and the design card's meta.
LIFECYCLE = (
    "CREATE TABLE identity (id INTEGER PRIMARY KEY CHECK (id = 1), created_at_ms INTEGER NOT NULL, "
    "erased_at_ms INTEGER)",
    "CREATE TABLE idempotency (key TEXT PRIMARY KEY, expires_at_ms INTEGER NOT NULL, result BLOB)",
    *RATE_WINDOWS_SCHEMA,
    *PLATFORM_META,
)
# Received mail (IN-1..IN-7): messages with their bodies, attachments, threads, sources, waits.
INBOUND = (
    "CREATE TABLE messages (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
    "thread_id TEXT NOT NULL, message_id_header TEXT, from_addr TEXT NOT NULL, "
    "subject TEXT NOT NULL, date_ms INTEGER, received_at_ms INTEGER NOT NULL, "
    "size_bytes INTEGER NOT NULL, detail BLOB NOT NULL, text TEXT, html TEXT, raw BLOB)",
    "CREATE INDEX messages_by_thread ON messages (thread_id, seq)",
    "CREATE TABLE attachment_chunks (message_id TEXT NOT NULL, idx INTEGER NOT NULL, "
    "chunk INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (message_id, idx, chunk)) "
    "WITHOUT ROWID",
    # A merged thread names its survivor in merged_into (IN-11).
    "CREATE TABLE threads (id TEXT PRIMARY KEY, size INTEGER NOT NULL, "
    "created_at_ms INTEGER NOT NULL, last_at_ms INTEGER NOT NULL, merged_into TEXT) WITHOUT ROWID",
    "CREATE INDEX threads_merged ON threads (merged_into) WHERE merged_into IS NOT NULL",
    "CREATE TABLE thread_keys (key TEXT PRIMARY KEY, thread_id TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE inbound_sources (source_id TEXT PRIMARY KEY, digest TEXT NOT NULL, "
    "message_id TEXT NOT NULL, thread_id TEXT NOT NULL, defects BLOB NOT NULL) WITHOUT ROWID",
    *WAITS_SCHEMA,
    *RAW_SCHEMA,  # the raw sources (UI-2) over RAW_INLINE_MAX; smaller ones in messages.raw
    # Search (IN-9, IN-10): attachment text and the FTS5 index (its shadow tables are FTS5's).
    *SEARCH_SCHEMA[:2],
)

# The mailbox's own tables: lifecycle, the roster's Post (objects/roster.py), outbound mail (the
# Carrier library's tables: carrier/schema.py) and inbound mail. The file also holds the runtime's
# tables, the same in every object's file (``platform/storage/opening.RUNTIME_TABLES``: its meta,
# alarm, KV and the outbox of the mailbox's events).
SCHEMA = (*LIFECYCLE, *POST_TABLES, *carrier.SCHEMA, *INBOUND)
