"""Defects a review of the runtime found (RT-6, RT-7, AL-1, AL-4), each as the behaviour a user
relies on: actor SQL cannot crash the node or reach the runtime's tables or escape the size limit;
a transaction is all or nothing even when SQLite itself ends it; block_concurrency_while excludes
every other request; a stored alarm is never lost to a temporary failure."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import actors_for_tests as afs
from mailbox_actors.platform.sql import Limits
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError

HERE = Path(__file__).parent
SMALL = Limits(max_database_bytes=64 * 1024)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    afs.reset_state()
    yield
    afs.reset_state()


def test_actor_sql_cannot_call_fts3_tokenizer(tmp_path: Path) -> None:
    """RT-6: fts3_tokenizer takes a raw pointer; a crafted one would crash the whole node
    (SIGSEGV). It is refused, in a process of its own so a crash cannot take the tests down."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]))
    proc = subprocess.run([sys.executable, str(HERE / "_sql_escape_proc.py"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "refused: invalid_request" in proc.stdout.splitlines()


@pytest.mark.anyio
async def test_actor_sql_cannot_reuse_the_runtimes_statements(tmp_path: Path) -> None:
    """RT-6: the table of prepared statements (which would show the runtime's statement texts)
    is refused, and so is any text carrying the runtime's token: the cached, pre-authorised
    statement that writes _ma_alarm stays the runtime's."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 10**9)

        async def evil(actor: afs.Scratch, call: object, arg: object) -> list[str]:
            out = []
            for sql in ("SELECT sql FROM sqlite_stmt",
                        f"INSERT OR REPLACE INTO _ma_alarm VALUES (1, 1) /*{actor.sql._token}*/"):
                try:
                    actor.sql.exec(sql).all()
                    out.append("ran")
                except MailboxActorsError as e:
                    out.append(e.code.value)
            return out

        assert await afs.run(rt, oid, evil) == ["invalid_request", "invalid_request"]


@pytest.mark.anyio
async def test_temporary_tables_cannot_escape_the_size_limit(tmp_path: Path) -> None:
    """RT-7: temporary tables live outside the file and its max_database_bytes: refused."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, limits=SMALL) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def hook(actor: afs.Scratch, call: object, arg: object) -> None:
            actor.sql.exec("CREATE TEMP TABLE big (v TEXT)")

        with pytest.raises(MailboxActorsError) as info:
            await afs.run(rt, oid, hook)
        assert info.value.code.value == "invalid_request" and "temporary" in info.value.message
