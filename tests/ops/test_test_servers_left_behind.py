"""The suite's PostgreSQL servers leave nothing behind in memory when a run is killed: their
dynamic shared memory lives under their own directory (not in /dev/shm's ``PostgreSQL.<n>``
segments, which nothing can tell from another server's), and a later run removes the
directories of servers whose test process is gone (``_pg.sweep_leftovers``), never one a live
test process owns or whose server still runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from _pg import serving, sweep_leftovers


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def _server_dir(parent: Path, name: str, *, owner: int | None, server: int | None,
                age_s: float = 0) -> Path:
    root = parent / f"ma-pg-{name}"
    (root / "data").mkdir(parents=True)
    if owner is not None:
        (root / "owner.pid").write_text(str(owner))
    if server is not None:
        (root / "data" / "postmaster.pid").write_text(f"{server}\n/data\n")
    if age_s:
        then = time.time() - age_s
        os.utime(root, (then, then))
    return root


def test_only_directories_no_live_process_owns_are_swept(tmp_path: Path) -> None:
    dead, me = _dead_pid(), os.getpid()
    kept = [
        _server_dir(tmp_path, "mine", owner=me, server=_dead_pid(), age_s=600),
        _server_dir(tmp_path, "serving", owner=dead, server=me, age_s=600),
        _server_dir(tmp_path, "initdb", owner=None, server=None, age_s=600),  # being made
        _server_dir(tmp_path, "new", owner=None, server=dead),  # an older run's, just killed
        tmp_path / "other",
    ]
    kept[-1].mkdir()
    gone = [
        _server_dir(tmp_path, "killed", owner=dead, server=dead),
        _server_dir(tmp_path, "stopped", owner=dead, server=None),
        _server_dir(tmp_path, "old", owner=None, server=dead, age_s=600),
    ]
    assert sweep_leftovers(tmp_path) == len(gone)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in gone)


def test_a_test_server_keeps_its_shared_memory_under_its_own_directory() -> None:
    with serving() as pg:
        with psycopg.connect(pg.dsn()) as conn:
            kind = conn.execute("SHOW dynamic_shared_memory_type").fetchone()
        assert kind == ("mmap",)
        assert any((pg.data / "pg_dynshmem").iterdir())  # its control segment, a file here
        assert (pg.root / "owner.pid").read_text() == str(os.getpid())
    assert not pg.root.exists()
