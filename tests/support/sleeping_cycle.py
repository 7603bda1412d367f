"""What an alarm on a sleeping actor does to its file, for the storage tests and the programs they
run in processes of their own (which get this folder on their ``PYTHONPATH``: ``CHILD_ENV``)."""

from __future__ import annotations

import os
from pathlib import Path

from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.opening import open_storage
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage

__all__ = ["CHILD_ENV", "cycle"]

# The environment of a child program that imports this module.
CHILD_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}


def cycle(path: Path, value: int, durability: str = Durability.NORMAL) -> None:
    """Open, one write, close."""
    sql = open_storage(path, create=True, durability=durability, limits=Limits(),
                       now_ms=lambda: 0)
    assert sql is not None
    sql.exec("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
    sql.exec("INSERT INTO t (v) VALUES (?)", value)
    RuntimeStorage(sql).close()
