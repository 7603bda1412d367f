"""Post's schema on PostgreSQL (PO-9), as ordered migrations recorded in ``post_schema``.

``apply_schema(conn)`` brings a database to the newest version inside one transaction, under an
advisory lock so two processes migrating at once do not race; a database newer than this code is
refused. Never edit a released migration; append one.
"""

from __future__ import annotations

from typing import Any

from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["MIGRATIONS", "apply_schema"]

_PENDING = "('queued', 'running', 'failed')"

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE post_envelopes (key text PRIMARY KEY, route text NOT NULL, "
        "kind text NOT NULL, producer text NOT NULL, namespace text NOT NULL, "
        "object_name text NOT NULL, tenant_id text, identity_id text, digest text NOT NULL, "
        "address text NOT NULL, event text NOT NULL, prepared text, "
        "created_at_ms bigint NOT NULL)",
        "CREATE SEQUENCE post_jobs_seq",
        "CREATE TABLE post_jobs (seq bigint PRIMARY KEY DEFAULT nextval('post_jobs_seq'), "
        "key text NOT NULL UNIQUE REFERENCES post_envelopes (key) ON DELETE CASCADE, "
        "address_key text NOT NULL, state text NOT NULL, attempts integer NOT NULL DEFAULT 0, "
        "next_attempt_at_ms bigint NOT NULL, lease_until_ms bigint, reason text, receipt text, "
        "updated_at_ms bigint NOT NULL)",
        "CREATE INDEX post_jobs_by_address ON post_jobs (address_key, seq)",
        f"CREATE INDEX post_jobs_pending ON post_jobs (address_key, seq) WHERE state IN {_PENDING}",
    ),
    (  # PO-12: attempts count receiver invocations; runs (the budget's count) every try
        "ALTER TABLE post_jobs ADD COLUMN runs integer NOT NULL DEFAULT 0",
        "UPDATE post_jobs SET runs = attempts",
        "ALTER TABLE post_jobs ADD COLUMN job_id text",
    ),
)

_LOCK = 7_305_050_001  # pg_advisory_xact_lock key for Post's migrations


async def apply_schema(conn: Any, migrations: tuple[tuple[str, ...], ...] = MIGRATIONS) -> int:
    """Migrate ``conn``'s database (an ``psycopg.AsyncConnection``); returns the version."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        await conn.execute("CREATE TABLE IF NOT EXISTS post_schema (version integer NOT NULL)")
        row = await (await conn.execute("SELECT max(version) FROM post_schema")).fetchone()
        found = row[0] or 0
        if found > len(migrations):
            raise MailboxActorsError(
                ErrorCode.INTERNAL_ERROR,
                f"Post's PostgreSQL schema is version {found}; this code knows {len(migrations)}",
                details={"schema_version": found, "known": len(migrations)})
        for version, statements in enumerate(migrations[found:], start=found + 1):
            for stmt in statements:
                await conn.execute(stmt)
            await conn.execute("INSERT INTO post_schema (version) VALUES (%s)", (version,))
        return len(migrations)
