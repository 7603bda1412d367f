"""Post's producer tables in one place (PO-2, PO-12): a file built from ``POST_MIGRATIONS`` has
exactly the layout ``POST_TABLES`` declares."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

from mailbox_actors.post.sql import POST_MIGRATIONS, POST_TABLES


def _layout(statements: Iterable[str]) -> dict[str, str]:
    conn = sqlite3.connect(":memory:")
    try:
        for stmt in statements:
            conn.execute(stmt)
        rows = conn.execute("SELECT name, sql FROM sqlite_master "
                            "WHERE name NOT LIKE 'sqlite_%'").fetchall()
    finally:
        conn.close()
    return {name: re.sub(r"\s+", " ", (sql or "").replace('"', "")).strip() for name, sql in rows}


def test_the_migrations_build_the_declared_tables() -> None:
    """PO-12: replaying Post's migrations (the runs and job_id columns added to a file made
    before them) gives POST_TABLES, column for column, index for index."""
    assert _layout(s for m in POST_MIGRATIONS for s in m) == _layout(POST_TABLES)
