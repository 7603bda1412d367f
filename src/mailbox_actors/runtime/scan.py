"""Finding every pending alarm from the actor files themselves (AL-4), when a node starts without
its alarm index: the files are the truth, the index only a cache of them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mailbox_actors.core.actor_ids import check_id
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.storage.opening import open_storage
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.errors import MailboxActorsError

__all__ = ["scan_alarms"]


def scan_alarms(actors_dir: Path, namespace_keys: Mapping[str, bytes], settings: RuntimeSettings,
                clock: Clock, log: Any, progress: Callable[[int], None] | None = None,
                stop: threading.Event | None = None) -> dict[tuple[str, str], int]:
    """The stored alarm of every actor file under ``actors_dir`` of a namespace served here;
    ``progress`` hears the count every 1000 files. It only reads, so it may run in a worker
    thread while the node serves; ``stop`` set ends it early (what it found so far)."""
    found: dict[tuple[str, str], int] = {}
    n = 0
    if not actors_dir.exists():
        return found
    for ns_dir in sorted(actors_dir.iterdir()):
        key = namespace_keys.get(ns_dir.name)
        if key is None or not ns_dir.is_dir():
            continue
        for shard in sorted(ns_dir.iterdir()):
            for f in sorted(shard.glob("*.sqlite")):
                object_id = f.name[: -len(".sqlite")]
                if check_id(key, object_id) is not None:
                    continue
                n += 1
                if stop is not None and stop.is_set():
                    return found
                if progress is not None and n % 1000 == 0:
                    progress(n)
                try:
                    sql = open_storage(f, create=False, durability=settings.durability,
                                       limits=settings.limits, now_ms=clock.now_ms)
                except MailboxActorsError:
                    log.error("alarm_scan_unreadable", namespace=ns_dir.name, object_id=object_id)
                    continue
                if sql is None:
                    continue
                storage = RuntimeStorage(sql)
                at = storage.stored_alarm()
                storage.close()
                if at is not None:
                    found[(ns_dir.name, object_id)] = at
    return found
