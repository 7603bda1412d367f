"""The alarm index's log is copied into its file by a thread of its own, never by the event loop's
commits (AL-4; issue 28: a burst of due alarms must not starve requests; a checkpoint copies up
to 1,000 pages and syncs). Real SQLite files; the thread is waited for by what it did, with a
guard against a hang only."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.node.alarm_index import IndexCheckpoints, open_alarm_index

GUARD_S = 60


def _write(index: AlarmIndex, transactions: int, rows: int) -> dict[tuple[str, str], int]:
    written: dict[tuple[str, str], int] = {}
    for t in range(transactions):
        changes = {("ns", f"{(t * 7919 + r * 104729) % 1_000_003:064x}"): t * rows + r
                   for r in range(rows)}
        index.apply(changes)  # type: ignore[arg-type]
        written.update(changes)
    return written


def _file_size(path: Path) -> int:
    return path.stat().st_size


def test_commits_of_an_index_with_checkpoints_elsewhere_never_copy_the_log(tmp_path: Path,
                                                                          ) -> None:
    """300 commits of 10 rows each: an index whose checkpoints are made elsewhere leaves its file
    as it was (everything is in the log, readable); one without copies the log into the file
    itself, inside a commit (SQLite's automatic checkpoint)."""
    elsewhere, itself = tmp_path / "elsewhere.sqlite", tmp_path / "itself.sqlite"
    never = IndexCheckpoints(elsewhere, every_rows=10**9)
    index = AlarmIndex(elsewhere, checkpoints=never)
    empty = _file_size(elsewhere)
    written = _write(index, 300, 10)
    assert _file_size(elsewhere) == empty
    assert AlarmIndex.read(elsewhere) == written
    index.close()
    plain = AlarmIndex(itself)
    empty = _file_size(itself)
    _write(plain, 300, 10)
    assert _file_size(itself) > empty
    plain.close()


def test_the_thread_copies_the_log_after_every_rows_and_ends_at_close(tmp_path: Path) -> None:
    """After ``every_rows`` rows committed, the thread makes a checkpoint: the file then holds
    the rows; closing the index ends the thread."""
    path = tmp_path / "alarms.sqlite"
    checkpoints = IndexCheckpoints(path, every_rows=100)
    index = AlarmIndex(path, checkpoints=checkpoints)
    empty = _file_size(path)
    assert not any(t.name == "alarm-index-checkpoints" for t in threading.enumerate())
    written = _write(index, 30, 10)
    guard = time.monotonic() + GUARD_S
    while checkpoints.done == 0 or _file_size(path) == empty:
        assert time.monotonic() < guard, "no checkpoint made"
        time.sleep(0.001)
    assert AlarmIndex.read(path) == written
    index.close()
    assert not any(t.name == "alarm-index-checkpoints" for t in threading.enumerate())


def test_a_node_opens_its_index_with_checkpoints_on_a_thread(tmp_path: Path) -> None:
    """The index a node opens (found sound, or fresh to be rebuilt) has its checkpoints made
    elsewhere; its own commits copy the log only past the bound (4,000 pages, not SQLite's
    1,000)."""
    path = tmp_path / "alarms.sqlite"
    for _ in range(2):  # fresh (incomplete), then found sound
        opened = open_alarm_index(path, durability_full=False, now_ms=lambda: 0,
                                  say=lambda _text: None)
        assert opened.index._checkpoints is not None  # type: ignore[attr-defined]
        conn_autocheckpoint = opened.index._conn.execute(  # type: ignore[attr-defined]
            "PRAGMA wal_autocheckpoint").fetchone()[0]
        assert conn_autocheckpoint == 4_000
        opened.index.close()
        (tmp_path / "alarms.sqlite.incomplete").unlink(missing_ok=True)


def test_the_log_stays_bounded_when_the_thread_falls_behind(tmp_path: Path) -> None:
    """While the loop writes on, the thread's checkpoints may never catch the log's end (or
    never run: a full disk, a busy machine); the log still stays within its bound, the index's
    own commit copying the rest past it, and every row is there (review of 29886cd: 417 MB of
    log in a 100,000-alarm burst, a restart after a kill reading all of it)."""
    path = tmp_path / "alarms.sqlite"
    index = AlarmIndex(path, checkpoints=IndexCheckpoints(path, every_rows=10**9))
    wal = Path(f"{path}-wal")
    bound = 4_000 * (4096 + 24) + 32  # pages of log with their frame headers, the log's header
    written: dict[tuple[str, str], int] = {}
    peak = 0
    for t in range(1_500):  # a burst's lazy writes, 32 a piece
        changes = {("ns", f"{(t * 32 + r) * 2654435761 % 2**61:064x}"): t for r in range(32)}
        index.apply(changes)  # type: ignore[arg-type]
        written.update(changes)
        peak = max(peak, _file_size(wal))
    assert peak > 1_000 * 4096  # the bound was reached, not a log too small to tell
    assert peak <= bound + 64 * 4120  # at most one piece's pages past it
    assert AlarmIndex.read(path) == written
    index.close()
