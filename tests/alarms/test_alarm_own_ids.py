"""An alarm's key is an id the node recorded itself (its alarm index, a scan of its own files):
opening its actor checks the id's form, not its HMAC (RT-1, AL-4); every request-facing path
keeps the HMAC check (``tests/runtime/test_identity.py``, ``tests/node/test_node_http.py``'s
``test_bad_ids_are_invalid_request_and_write_nothing``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import structlog

import actors_for_tests as afs
from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.alarms.outcome import AlarmOutcome
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError

pytestmark = pytest.mark.anyio


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("file_threads", [0, 4])
async def test_a_malformed_alarm_key_is_refused_without_touching_any_file(
        tmp_path: Path, file_threads: int) -> None:
    """RT-1: an alarm key that is not 64 lowercase hex digits (a path's ``../``, a slash, upper
    case, a wrong length) opens nothing, opened on the loop or ahead in a thread: the wake is
    MALFORMED, nothing is created or read anywhere under or outside the data directory, and
    the node goes on."""
    data = tmp_path / "node"
    outside = tmp_path / "outside.sqlite"
    outside.write_bytes(b"")
    async with TestRuntime(data, objects=afs.ALL_OBJECTS, file_threads=file_threads) as rt:
        good = await afs.new_scratch(rt, "ok")
        rt.node.host.evict_all_idle()
        before = _files(tmp_path)
        host = rt.node.host
        for bad in ("../" * 20 + "outside", "../../outside.sqlite", good.upper(), good[:-1],
                    good + "0", good[:32] + "/" + good[33:], ""):
            assert (await host.fire_alarm(("scratch", bad), 0)).outcome is AlarmOutcome.MALFORMED
        assert _files(tmp_path) == before
        assert host.active_count == 0
        assert outside.read_bytes() == b""


async def test_an_alarm_key_of_the_right_form_is_not_hmac_checked_but_a_request_is(
        tmp_path: Path) -> None:
    """RT-1: a key of an id's form that this node never minted (no such file) is a wake for no
    actor (GONE) on the alarm path; the same id in a request is refused as invalid_request, its
    HMAC checked, and no file is made either way."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        forged = "0123456789abcdef" * 4
        before = _files(tmp_path)
        outcome = (await rt.node.host.fire_alarm(("scratch", forged), 0)).outcome
        assert outcome is AlarmOutcome.GONE
        with pytest.raises(MailboxActorsError) as e:
            await afs.scratch(rt, forged, afs.Get(k="x"))
        assert e.value.code == "invalid_request"
        assert "object id" in e.value.message
        assert _files(tmp_path) == before


async def test_a_malformed_key_in_the_alarm_index_is_dropped_once_not_retried(
        tmp_path: Path) -> None:
    """AL-4, RT-1: a row of the node's alarm index whose key is no id (a damaged index) is
    looked at once when due: dropped from the scheduler and the index, logged once without the
    key (``alarm_key_dropped``) and counted in ``alarms_dropped_total``; it is not tried again
    (every 64 s, as a file that cannot be opened now is), and the good alarm beside it fires."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        t0 = rt.now_ms()
        good = await afs.new_scratch(rt, "good", alarm_at=t0 + 2_000)
    bad = "../" * 3 + "Private Name"
    conn = sqlite3.connect(tmp_path / "alarms.sqlite", isolation_level=None)
    conn.execute("INSERT INTO alarms VALUES ('scratch', ?, ?)", (bad, t0 + 1_000))
    conn.close()
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        scheduler = rt.node.scheduler
        assert scheduler.pending(("scratch", bad)) == t0 + 1_000
        with structlog.testing.capture_logs() as logs:
            await rt.advance(2_000)
            await rt.advance(10 * 64_000)
        dropped = [e for e in logs if e["event"] == "alarm_key_dropped"]
        assert len(dropped) == 1 and dropped[0]["namespace"] == "scratch"
        assert dropped[0]["log_level"] == "warning"
        assert "Private" not in str(logs) and not any(
            e["event"] == "alarm_actor_unavailable" for e in logs)
        assert rt.node.metrics.get("alarms_dropped_total", (("namespace", "scratch"),)) == 1
        assert scheduler.pending(("scratch", bad)) is None
        assert ("scratch", bad) not in AlarmIndex.read(tmp_path / "alarms.sqlite")
        assert [s.object_id for s in afs.ALARM_LOG] == [good]
