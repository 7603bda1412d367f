"""What an evicted actor's file opened ahead in a worker thread brings to the event loop (RT-2,
RT-13, RT-14, AL-4): the stored alarm, the runtime meta as the loop's own open reads it, and a
connection with the open-time settings made, whether SQLite is called once for the settings
(``exec_script``) or statement by statement; a file of a newer runtime schema is left to the loop.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mailbox_actors.platform.storage import opening
from mailbox_actors.platform.storage.handle import exec_script
from mailbox_actors.platform.storage.limits import Durability, Limits, page_limits
from mailbox_actors.platform.storage.opening import connect_ahead, open_storage
from mailbox_actors.platform.storage.sql import RUNTIME_SCHEMA_VERSION
from mailbox_actors.runtime.activation import META_KEYS
from mailbox_actors.runtime.migrations import SCHEMA_VERSION_KEY
from mailbox_actors.runtime.owner import OWNER_META_KEYS


def _actor_file(tmp_path: Path, meta: dict[str, str], alarm_ms: int | None) -> Path:
    """A file made by the runtime's own open, with ``meta`` and the alarm stored, then closed."""
    path = tmp_path / "actor.sqlite"
    storage = open_storage(path, create=True, durability=Durability.NORMAL, limits=Limits(),
                           now_ms=lambda: 1_000)
    assert storage is not None
    storage._conn.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO _ma_meta (k, v) VALUES (?, ?)", meta.items())
    if alarm_ms is not None:
        conn.execute("INSERT INTO _ma_alarm (id, at_ms) VALUES (1, ?)", (alarm_ms,))
    conn.execute("COMMIT")
    conn.close()
    return path


def _settings(conn: sqlite3.Connection) -> tuple[int, int, int, int]:
    return (conn.execute("PRAGMA foreign_keys").fetchone()[0],
            conn.execute("PRAGMA cache_size").fetchone()[0],
            conn.execute("PRAGMA synchronous").fetchone()[0],
            conn.execute("PRAGMA max_page_count").fetchone()[0])


@pytest.mark.parametrize("one_call", [True, False])
def test_opened_ahead_brings_the_alarm_and_meta_with_the_settings_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_call: bool) -> None:
    """RT-2, RT-13, AL-4: the file's stored alarm and its runtime meta (quotes and non-ASCII text
    kept exactly) come with the connection, which has the open-time settings (foreign keys,
    the page cache bound, synchronous=NORMAL, the ordinary page limit), whether the settings
    are made in one call into SQLite or, where the connection's handle cannot be reached, one
    statement at a time."""
    owner = {k: f"it's \u00e9t\u00e9 \"{k}\"" for k in OWNER_META_KEYS}
    meta = {SCHEMA_VERSION_KEY: "2", **owner, "zz_other": "x"}
    path = _actor_file(tmp_path, meta, alarm_ms=123_456)
    if not one_call:
        monkeypatch.setattr(opening, "exec_script", lambda *_args: None)
    ahead = connect_ahead(path, Durability.NORMAL, Limits(), META_KEYS)
    assert ahead is not None
    try:
        alarm, read = ahead.first
        assert alarm == 123_456
        for k, v in meta.items():
            if k >= min(META_KEYS):  # the keys the first read brings (from the least on)
                assert read[k] == v
        assert set(META_KEYS) - set(read) <= set(META_KEYS) - set(meta)
        assert _settings(ahead.conn) == (1, -opening.PAGE_CACHE_KIB, 1,
                                         page_limits(Limits())[0])
    finally:
        ahead.conn.close()


def test_opened_ahead_without_an_alarm_or_meta(tmp_path: Path) -> None:
    """AL-4: a file with no alarm stored and no runtime meta yet comes with None and no keys."""
    path = _actor_file(tmp_path, {}, alarm_ms=None)
    ahead = connect_ahead(path, Durability.NORMAL, Limits(), META_KEYS)
    assert ahead is not None
    try:
        assert ahead.first == (None, {})
    finally:
        ahead.conn.close()


def test_a_file_of_a_newer_runtime_schema_is_left_to_the_loop(tmp_path: Path) -> None:
    """RT-14: a file whose runtime schema is newer than this code knows gives None (the open on
    the loop refuses it with its reason), and it is left as it was."""
    path = _actor_file(tmp_path, {}, alarm_ms=5)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {RUNTIME_SCHEMA_VERSION + 1}")
    conn.close()
    assert connect_ahead(path, Durability.NORMAL, Limits(), META_KEYS) is None
    conn = sqlite3.connect(path, isolation_level=None)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == RUNTIME_SCHEMA_VERSION + 1
    conn.close()


def test_exec_script_runs_every_statement_and_reports_a_failure(tmp_path: Path) -> None:
    """Every statement of the script runs, in order; SQLite's result code says when one failed
    (the statements before it stand)."""
    path = tmp_path / "plain.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert exec_script(conn, path, b"PRAGMA foreign_keys = ON; PRAGMA cache_size = -77;") == 0
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -77
        failed = exec_script(conn, path, b"PRAGMA cache_size = -5; SELECT * FROM no_such_table;")
        assert failed not in (None, 0)
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -5
    finally:
        conn.close()
