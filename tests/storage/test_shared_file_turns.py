"""A shared SQLite file's statements on a free file (Q-1): handed to the file's thread without a
turn of the event loop first (on a busy loop a turn is a wait behind every ready task), while
callers that find the file in use still take their turns in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mailbox_actors.platform.sqlite.shared_file import SharedSqliteFile


async def _nothing(_f: SharedSqliteFile) -> None:
    return None


@pytest.mark.anyio
async def test_a_free_files_statement_goes_to_its_thread_without_a_loop_turn(
        tmp_path: Path) -> None:
    """Q-1: no task made ready before a statement on a free file runs before the statement is
    handed to the file's thread; two callers at once are served in the order they came."""
    f = SharedSqliteFile(tmp_path / "shared.sqlite", what="test file", busy_timeout_ms=100,
                         migrate=_nothing)
    await f.open()
    try:
        conn = f._require()
        real = conn.execute_fetchall
        ran: list[str] = []
        handed: list[tuple[str, list[str]]] = []

        async def spy(sql: str, params: Any = ()) -> Any:
            handed.append((sql, list(ran)))
            return await real(sql, params)

        conn.execute_fetchall = spy  # type: ignore[method-assign]

        async def ready() -> None:
            ran.append("other task")

        async with anyio.create_task_group() as tg:
            tg.start_soon(ready)  # ready at the next turn of the loop
            assert await f.fetch("SELECT 1") == [(1,)]
        assert handed == [("SELECT 1", [])]

        got: list[int] = []

        async def caller(n: int) -> None:
            got.append((await f.fetch(f"SELECT {n}"))[0][0])

        async with anyio.create_task_group() as tg:
            for n in (2, 3, 4):
                tg.start_soon(caller, n)
        assert [sql for sql, _ in handed[1:]] == ["SELECT 2", "SELECT 3", "SELECT 4"]
        assert got == [2, 3, 4]
    finally:
        await f.close()
