"""Opening the node's alarm index at start (AL-4, OPS-2): built from the actor files when it is
missing, and rebuilt the same way when it is damaged.

The index is derived data (every actor's file holds its own alarm), so a damaged index is never a
reason to refuse to start: it is moved aside (kept beside, for inspection) and rebuilt by a scan.
The index is built under a temporary name and moved into place whole, so a scan that is killed
half-way leaves no index and the next start scans again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import structlog

from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.platform.sqlite_files import damage_of

__all__ = ["open_alarm_index"]

Key = tuple[str, str]
Scan = Callable[[Callable[[int], None]], dict[Key, int]]

_log = structlog.get_logger("mailbox_actors.node")


def open_alarm_index(path: Path, scan: Scan, *, durability_full: bool, now_ms: Callable[[], int],
                     say: Callable[[str], None]) -> tuple[AlarmIndex, dict[Key, int]]:
    """The open index and every alarm it holds."""
    def progress(n: int) -> None:
        say(f"scanning actor files for alarms: {n} so far")

    damage = damage_of(path) if path.is_file() else None
    if damage is not None:
        _set_aside(path, damage, now_ms(), say)
    if not path.exists():  # first start, deleted, or set aside just now: the actor files tell
        AlarmIndex.build(path, scan(progress), durability_full=durability_full)
    try:
        index = AlarmIndex(path, durability_full=durability_full)
        return index, index.load()
    except sqlite3.DatabaseError as e:  # damage the header check could not see
        if isinstance(e, sqlite3.OperationalError):
            raise  # locked, out of descriptors, a full disk: not the file's fault
        _set_aside(path, type(e).__name__, now_ms(), say)
        AlarmIndex.build(path, scan(progress), durability_full=durability_full)
        index = AlarmIndex(path, durability_full=durability_full)
        return index, index.load()


def _set_aside(path: Path, damage: str, now: int, say: Callable[[str], None]) -> None:
    aside = path.with_name(f"{path.name}.damaged-{now}")
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            part.rename(aside.with_name(aside.name + suffix))
    _log.warning("alarm_index_damaged", damage=damage, moved_to=str(aside),
                 action="rebuilding it from the actor files")
    say(f"the alarm index was damaged ({damage}); moved to {aside}, rebuilding it")
