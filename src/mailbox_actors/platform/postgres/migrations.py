"""Ordered migrations on PostgreSQL (CL-7), one sequence per component (``control``, ``queues``,
and whatever builds on them, such as the machines' slots and leases), recorded in
``ma_schema (component, version)`` and applied in one transaction under an advisory lock, so that
many processes starting at once migrate once. A database whose component is newer than the code
is refused (as PO-9): never downgraded.

    MACHINES = Schema("machines", (("CREATE TABLE slots (...)", ...), ...))  # append only
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mailbox_actors.wire.errors import PlatformError, PlatformErrorKind

__all__ = ["LOCK_KEY", "Schema", "SchemaTooNew", "apply_schema", "schema_version"]

LOCK_KEY = 7_305_050_002  # pg_advisory_xact_lock key for every component's migrations
_TABLE = ("CREATE TABLE IF NOT EXISTS ma_schema (component text PRIMARY KEY, "
          "version integer NOT NULL)")


@dataclass(frozen=True, slots=True)
class Schema:
    """A component's migrations: position i (from 1) is version i. Append only."""

    component: str
    migrations: tuple[tuple[str, ...], ...]

    @property
    def version(self) -> int:
        return len(self.migrations)


class SchemaTooNew(PlatformError):
    """The database was migrated by newer code; refused, never downgraded."""

    def __init__(self, component: str, found: int, known: int) -> None:
        super().__init__(
            PlatformErrorKind.INTERNAL, "postgres", "schema_too_new",
            f"the PostgreSQL database's {component} schema is version {found}; this code knows "
            f"up to {known}",
            details={"component": component, "schema_version": found, "known": known},
            fix="Run the newer mailbox-actors that migrated this database.")


async def schema_version(conn: Any, component: str) -> int:
    """The component's version in ``conn``'s database (0: never migrated)."""
    cur = await conn.execute("SELECT to_regclass('ma_schema') IS NOT NULL")
    row = await cur.fetchone()
    if not row or not row[0]:
        return 0
    cur = await conn.execute("SELECT version FROM ma_schema WHERE component = %s", (component,))
    row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def apply_schema(conn: Any, schema: Schema) -> tuple[int, int]:
    """Bring ``schema``'s component in ``conn``'s database (a psycopg ``AsyncConnection`` in
    autocommit) to the newest version; (version found, version now)."""
    found = await schema_version(conn, schema.component)
    if found > schema.version:
        raise SchemaTooNew(schema.component, found, schema.version)
    if found == schema.version:
        return found, found  # a restart against a current database takes no lock
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        await conn.execute(_TABLE)
        found = await schema_version(conn, schema.component)  # another process may have won
        if found > schema.version:
            raise SchemaTooNew(schema.component, found, schema.version)
        for statements in schema.migrations[found:]:
            for stmt in statements:
                await conn.execute(stmt)
        await conn.execute(
            "INSERT INTO ma_schema (component, version) VALUES (%s, %s) ON CONFLICT (component) "
            "DO UPDATE SET version = excluded.version", (schema.component, schema.version))
    return found, schema.version
