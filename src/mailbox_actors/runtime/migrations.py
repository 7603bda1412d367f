"""Versioned schema migrations (RT-8), guarded by the runtime's ``schema_version`` (in ``_ma_meta``).

Each actor class declares ordered migrations; they run on first access after activation, all pending
ones in one transaction. A file newer than the code is refused, never downgraded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["PLATFORM_META", "SCHEMA_VERSION_KEY", "Migration", "SchemaTooNew", "apply_migrations",
           "check_migrations"]

# The platform objects' own ``meta(k, v)`` of the design card (size_bytes and such). The runtime's
# keys are not in it (they live in ``_ma_meta``, out of reach of actor SQL: RT-14); a file from
# before that split keeps its table and its object-level keys.
PLATFORM_META = ("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID",)

SCHEMA_VERSION_KEY = "schema_version"  # in _ma_meta


class Migration(NamedTuple):
    version: int
    statements: tuple[str, ...]


class SchemaTooNew(MailboxActorsError):
    def __init__(self, found: int, known: int) -> None:
        super().__init__(ErrorCode.INTERNAL_ERROR,
                         f"actor file has schema_version {found}; this code knows up to {known}",
                         details={"schema_version": found, "known": known})


def check_migrations(migrations: Sequence[Migration], owner: str) -> None:
    """Refuse a migration list that does not count 1, 2, 3... (it would go backwards or skip)."""
    for i, m in enumerate(migrations, start=1):
        if not isinstance(m, Migration):
            raise TypeError(f"{owner}.migrations[{i - 1}] must be a Migration")
        if m.version != i:
            raise ValueError(f"{owner}.migrations must be numbered 1, 2, 3...; position {i} has "
                             f"version {m.version}")
        # A version may have no statement left: the outbox's, which objects listed until the
        # runtime made it its own (runtime schema 3), keep their number and nothing else.
        if not all(isinstance(s, str) and s.strip() for s in m.statements):
            raise ValueError(f"{owner}.migrations version {m.version} has an empty statement")


def apply_migrations(storage: RuntimeStorage, migrations: Sequence[Migration], current: int,
                     meta: tuple[str, str] | None = None) -> int:
    """Bring the file from ``current`` to the newest version; return the version it is at.
    ``meta``: a runtime key and value written with the migrations, in their transaction."""
    known = len(migrations)
    if current > known:
        raise SchemaTooNew(current, known)
    if current == known:
        return current

    def run(tx: SqlStorage) -> None:
        for m in migrations[current:]:
            for stmt in m.statements:
                tx.exec(stmt)
        storage.put_meta(SCHEMA_VERSION_KEY, str(known))
        if meta is not None:
            storage.put_meta(*meta)

    storage.sql.transaction_sync(run)
    return known
