"""``delete_all`` (RT-15): everything an actor stored goes, and then its file.

Durable Objects' ``deleteAll`` removes all of an object's storage, its SQL tables included, and
its alarm. Here that is every table and view of the actor's own (their indexes and triggers go
with them), every KV entry, the alarm, and the runtime's record of the actor (owner, schema
version, purposes): afterwards the object is as one never created. The file is removed when the
actor's storage closes (it is evicted once idle), unless something was written after the wipe.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["is_empty", "remove_files", "wipe_statements"]

Sys = Callable[[str], sqlite3.Cursor]

# The runtime's tables (``_ma_*``, and the outbox: ``opening.RUNTIME_TABLES``) are emptied, not
# dropped: the file keeps the runtime schema its version says it has.
_OWN_OBJECTS = ("SELECT type, name FROM sqlite_schema WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                "AND lower(substr(name, 1, 4)) NOT IN ('_ma_', '_cf_') AND name <> 'outbox'")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def wipe_statements(sys: Sys) -> list[str]:
    """The statements that empty the file, to run in one transaction (the alarm apart)."""
    out = ["PRAGMA defer_foreign_keys = ON"]  # tables drop in any order; none is left to violate
    rows: list[Any] = sys(_OWN_OBJECTS).fetchall()
    out += [f"DROP {kind.upper()} IF EXISTS {_quote(name)}" for kind, name in rows
            if kind == "view"]
    out += [f"DROP TABLE IF EXISTS {_quote(name)}" for kind, name in rows if kind == "table"]
    internal = {r[0] for r in sys("SELECT name FROM sqlite_schema WHERE name IN "
                                  "('sqlite_sequence', 'sqlite_stat1', 'sqlite_stat4')")}
    out += [f"DELETE FROM {name}" for name in sorted(internal)]
    out += ["DELETE FROM outbox", "DELETE FROM _ma_kv", "DELETE FROM _ma_meta"]
    return out


def is_empty(sys: Sys) -> bool:
    """Nothing of the actor's is left: no table of its own, no KV entry, no runtime key, no alarm."""
    return (sys(_OWN_OBJECTS + " LIMIT 1").fetchone() is None
            and sys("SELECT 1 FROM outbox LIMIT 1").fetchone() is None
            and sys("SELECT 1 FROM _ma_kv LIMIT 1").fetchone() is None
            and sys("SELECT 1 FROM _ma_meta LIMIT 1").fetchone() is None
            and sys("SELECT 1 FROM _ma_alarm LIMIT 1").fetchone() is None)


def remove_files(path: str | Path) -> None:
    """The database and its WAL and shared-memory files (after the connection closed)."""
    name = os.fspath(path)
    for p in (name, name + "-wal", name + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
