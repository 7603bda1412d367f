"""The mailbox's schema in one place (OBJ-1, CA-15): a file built by replaying IdentityMailbox's
migrations has exactly the tables and indexes ``identity_mailbox/schema.py`` declares, and a store
built from Carrier's ``SCHEMA`` is what Carrier's own migration steps give."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

from mailbox_actors.carrier import schema as carrier_schema
from mailbox_actors.objects.identity_mailbox.actor import IdentityMailbox
from mailbox_actors.objects.identity_mailbox.schema import SCHEMA


def _layout(statements: Iterable[str]) -> dict[str, tuple[str, str, str]]:
    """name -> (type, table, its CREATE text without quotes and spacing differences)."""
    conn = sqlite3.connect(":memory:")
    try:
        for stmt in statements:
            conn.execute(stmt)
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "WHERE name NOT LIKE 'sqlite_%'").fetchall()
    finally:
        conn.close()
    return {name: (kind, table, re.sub(r"\s+", " ", (sql or "").replace('"', "")).strip())
            for kind, name, table, sql in rows}


def test_the_migrations_build_the_declared_schema() -> None:
    """OBJ-1: replaying the migrations gives schema.py's layout, table for table, column for
    column, index for index."""
    replayed = _layout(s for m in IdentityMailbox.migrations for s in m.statements)
    assert replayed == _layout(SCHEMA)


def test_carriers_steps_build_its_schema() -> None:
    """CA-15: Carrier's migration steps, in order, give the layout a new store is created with."""
    steps = _layout(s for step in carrier_schema.MIGRATIONS for s in step)
    assert steps == _layout(carrier_schema.SCHEMA)
    assert set(carrier_schema.TABLES) <= set(steps)


def test_a_changed_declaration_is_noticed() -> None:
    """The comparison sees a column that differs."""
    changed = tuple(s.replace("erased_at_ms INTEGER)", "erased_at_ms TEXT)") for s in SCHEMA)
    assert _layout(changed) != _layout(SCHEMA)
