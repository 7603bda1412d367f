"""Actor files rewritten as the runtime's earlier layout wrote them, and raw reads of a file."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def to_previous_layout(path: Path, schema_version: int | None = None,
                       extra: dict[str, str] | None = None) -> None:
    """Rewrite an actor file as runtime schema 1 wrote it: every runtime key in a ``meta(k, v)``
    table the actor's SQL could see and write, ``user_version`` 1, no ``_ma_meta``."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID")
        # schema_source came after that layout (``known``): no file of it has one.
        conn.execute("INSERT OR REPLACE INTO meta SELECT k, v FROM _ma_meta "
                     "WHERE k != 'schema_source'")
        conn.execute("DROP TABLE _ma_meta")
        if schema_version is not None:
            conn.execute("UPDATE meta SET v = ? WHERE k = 'schema_version'", (str(schema_version),))
        for k, v in (extra or {}).items():
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, v))
        conn.execute("PRAGMA user_version = 1")
    conn.close()


def table_rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()
