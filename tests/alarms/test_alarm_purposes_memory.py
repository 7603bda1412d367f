"""The alarm purposes an actor has recorded are read from memory between its runs; what the
runtime answers is always what its file holds, through writes, rolled-back transactions,
savepoints and conditional clears (AL-2, RT-13)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.mailbox import MailboxInit

IDS = {"tenant_id": "t1", "identity_id": "i1"}
NS = "identity_mailbox"


class _Undo(Exception):
    pass


def _in_file(path: Path) -> dict[str, int]:
    """The purposes as another connection reads them from the file (committed state)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT k, v FROM _ma_meta WHERE k >= 'alarm:' AND k < 'alarm;'")
        return {k[6:]: int(v) for k, v in rows}
    finally:
        conn.close()


def _steps(actor: Any, storage: SqlStorage, path: Path) -> list[tuple[dict[str, int], dict[str, int]]]:
    ctx = actor.ctx
    seen: list[tuple[dict[str, int], dict[str, int]]] = []

    def look() -> None:
        seen.append((ctx.scheduled(), _in_file(path)))

    look()  # first read: from the file
    storage.transaction_sync(lambda tx: ctx.schedule("check", 5_000))
    look()

    def schedule_then_fail(tx: SqlStorage) -> None:
        ctx.schedule("later", 9_000)
        ctx.cancel("check")
        raise _Undo

    with pytest.raises(_Undo):  # rolled back: neither the new purpose nor the cancel stays
        storage.transaction_sync(schedule_then_fail)
    look()

    def outer(tx: SqlStorage) -> None:
        with pytest.raises(_Undo):  # only the savepoint rolls back
            tx.transaction_sync(schedule_then_fail)
        ctx.schedule("other", 7_000)
    storage.transaction_sync(outer)
    look()

    runtime = actor.ctx._runtime
    # A conditional clear that does not match keeps the purpose; one that matches removes it.
    storage.transaction_sync(lambda tx: runtime.delete_meta("alarm:other", only_if="1"))
    look()
    storage.transaction_sync(lambda tx: runtime.delete_meta("alarm:other", only_if="7000"))
    look()
    return seen


@pytest.mark.anyio
async def test_purposes_read_from_memory_are_what_the_file_holds(tmp_path: Path) -> None:
    """AL-2: after each write, rollback, savepoint rollback and conditional clear, the purposes
    the runtime reads (kept in memory between reads) equal what the file holds."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name(NS, "a")
        await rt.call(NS, m, MailboxInit(), **IDS)
        path = rt.node.host.path_for(NS, m)
        seen = await rt.run_in_actor(NS, m, lambda a, s: _steps(a, s, path))
    for runtime_view, file_view in seen:
        runtime_view.pop("outbox", None)  # the init event's own purpose, as the run left it
        file_view.pop("outbox", None)
        assert runtime_view == file_view
    first = set(seen[0][0])  # the mailbox's own purposes (maintenance, post)
    assert [sorted(set(v) - first) for v, _ in seen] == [
        [], ["check"], ["check"], ["check", "other"], ["check", "other"], ["check"]]
