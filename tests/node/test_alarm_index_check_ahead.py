"""The alarm index's quick check begun ahead (issue 28 item 4: restarts that do not grow with the
data; AL-4, OPS-2): ``serve`` begins it on a thread of its own before it imports the node, and the
start takes its answer as its own check's: a sound index is trusted without a second check, a
damaged one is set aside and rebuilt from the actor files as ever."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.node.alarm_index import QuickCheckAhead, open_alarm_index


def _index(path: Path, n: int) -> None:
    index = AlarmIndex(path)
    index.apply({("ns", f"{i:064x}"): 1_000 + i for i in range(n)})
    index.close()


def _open(path: Path, ahead: QuickCheckAhead) -> tuple[bool, list[str]]:
    said: list[str] = []
    opened = open_alarm_index(path, durability_full=False, now_ms=lambda: 7, say=said.append,
                              quick_check=ahead.check)
    opened.index.close()
    return opened.complete, said


def test_a_sound_index_checked_ahead_is_not_checked_again(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """AL-4: the start trusts a sound index on the check made ahead; its own check never runs."""
    path = tmp_path / "alarms.sqlite"
    _index(path, 2_000)
    ahead = QuickCheckAhead(path)

    def not_again(_index: AlarmIndex) -> str | None:
        raise AssertionError("checked twice")

    monkeypatch.setattr(AlarmIndex, "quick_check", not_again)
    assert _open(path, ahead) == (True, [])


def test_a_damaged_index_found_ahead_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    """OPS-2, AL-4: damage the header check cannot see (a b-tree page overwritten), found by the
    check made ahead, sets the index aside (kept) and opens a fresh one to rebuild."""
    path = tmp_path / "alarms.sqlite"
    _index(path, 2_000)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
    with open(path, "r+b") as f:
        f.seek((pages // 2) * size)
        f.write(b"\xff" * size)
    complete, said = _open(path, QuickCheckAhead(path))
    assert not complete
    assert any("damaged" in line for line in said)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("alarms.sqlite.damaged-")]


def test_a_missing_or_incomplete_index_is_not_checked_ahead(tmp_path: Path) -> None:
    """AL-4: nothing is checked ahead for an index that is missing (a first start) or marked
    incomplete (a rebuild was cut): its opening rebuilds it and checks nothing."""
    path = tmp_path / "alarms.sqlite"
    assert _open(path, QuickCheckAhead(path))[0] is False
    assert not (tmp_path / "alarms.sqlite.damaged-7").exists()
    _index(path, 10)
    assert _open(path, QuickCheckAhead(path))[0] is False  # the first start left it incomplete
