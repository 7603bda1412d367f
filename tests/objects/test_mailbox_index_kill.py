"""A message acknowledged by ``ingest`` is searchable after a SIGKILL that came before
``alarm:index`` indexed it (IN-10, IN-1): its place in the index's queue committed with it, and the
alarm, durable, indexes it after restart, with no search needed to catch it up."""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mailbox_actors.objects.identity_mailbox import search
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.search import SearchMessages

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
CHILD = Path(__file__).resolve().parents[1] / "support" / "_index_child.py"
NS = "identity_mailbox"
IDS = {"tenant_id": "ten_1", "identity_id": "idn_1"}


def _ingested_then_killed(data: Path) -> str:
    """The child ingests one message and is killed with SIGKILL once it has said so; the
    message's id."""
    proc = subprocess.Popen([sys.executable, str(CHILD), str(data)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout.fileno()], [], [], 60)
        assert ready, "the child said nothing within 60 s"
        line = proc.stdout.readline().decode().split()
        assert line[:1] == ["ingested"], line
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        proc.stdout.close()
    return line[1]


def _file_state(path: Path) -> tuple[int, set[str]]:
    """(messages queued for the index, every term the index holds), read beside the actor."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        queued = conn.execute("SELECT count(*) FROM search_pending").fetchone()[0]
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, message_search, 'row')")
        return int(queued), {r[0] for r in conn.execute("SELECT term FROM temp.v")}


async def test_a_message_ingested_before_a_sigkill_is_indexed_after_restart(
        tmp_path: Path) -> None:
    """IN-10: SIGKILL after ingest answered and before alarm:index ran: the file holds the
    message queued and no term of it; after restart the alarm indexes it (the queue empties, its
    words are in the index) before any search, and a search finds it."""
    data = tmp_path / "node"
    message_id = _ingested_then_killed(data)
    async with TestRuntime(data) as rt:
        m = rt.id_from_name(NS, "bob")
        path = rt.node.host.path_for(NS, m)
        assert _file_state(path) == (1, set())
        await rt.advance(search.INDEX_DELAY_MS)
        queued, terms = _file_state(path)
        assert queued == 0 and {"aardvark", "quokka", "report"} <= terms
        hits = (await rt.call(NS, m, SearchMessages(query="quokka"), **IDS))["messages"]
        assert [h["message_id"] for h in hits] == [message_id]
