"""The benchmark's large populations (``bench.population``): hard links to copies of one file, at
most LINKS_PER_SOURCE to a copy, and a check that fails once any of them was written."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from mailbox_actors.bench import population
from mailbox_actors.bench.figures import Progress
from mailbox_actors.bench.population import LinkedPopulation
from mailbox_actors.platform.storage.handle import keep_wal_on_close
from mailbox_actors.platform.storage.readonly import read_only


def test_links_share_a_few_copies_and_a_write_is_found(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every path is made (its directory too) as a link to a copy of the template, a new copy
    every LINKS_PER_SOURCE links; ``check_unwritten`` passes while no link was written and fails
    after a write through any of them."""
    monkeypatch.setattr(population, "LINKS_PER_SOURCE", 3)
    template = tmp_path / "template.sqlite"
    template.write_bytes(b"x" * 4096)
    pop = LinkedPopulation(template, tmp_path / "sources")
    paths = [tmp_path / "actors" / f"{i % 2:02x}" / f"{i}.sqlite" for i in range(7)]
    assert pop.link(iter(paths), len(paths), Progress(enabled=False)) == 7
    assert pop.count == 7
    copies = sorted((tmp_path / "sources").iterdir())
    assert len(copies) == 3  # 3 + 3 + 1 links
    assert [p.read_bytes() for p in paths] == [b"x" * 4096] * 7
    assert {os.stat(p).st_ino for p in paths} == {os.stat(c).st_ino for c in copies}
    stamp = pop.stamp()
    pop.check_unwritten(stamp)
    with open(paths[4], "ab") as f:  # a write through one link is a write to its copy
        f.write(b"y")
    with pytest.raises(RuntimeError, match="was written"):
        pop.check_unwritten(stamp)


def test_a_population_with_logs_reads_each_actor_with_its_last_commits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``log``, each file has the template's log beside it, as a sleeping actor keeps the
    log of its last commits: a read-only reader of any link sees the commits only the log holds,
    and a write to a log is found like one to a file. A template without a log is refused, not
    linked without one."""
    monkeypatch.setattr(population, "LINKS_PER_SOURCE", 2)
    template = tmp_path / "template.sqlite"
    conn = sqlite3.connect(template, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(v TEXT)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("INSERT INTO t VALUES ('in the log only')")
    keep_wal_on_close(conn, template)
    conn.close()
    assert os.path.getsize(f"{template}-wal") > 0
    pop = LinkedPopulation(template, tmp_path / "sources", log=True)
    paths = [tmp_path / "actors" / f"{i}.sqlite" for i in range(5)]
    assert pop.link(iter(paths), len(paths), Progress(enabled=False)) == 5
    for p in paths:
        assert os.stat(f"{p}-wal").st_size == os.stat(f"{template}-wal").st_size
        with read_only(p) as reader:
            assert reader is not None
            assert reader.execute("SELECT v FROM t").fetchall() == [("in the log only",)]
    stamp = pop.stamp()
    pop.check_unwritten(stamp)
    with open(f"{paths[3]}-wal", "ab") as f:  # a write to one link's log is a write to them all
        f.write(b"y")
    with pytest.raises(RuntimeError, match="was written"):
        pop.check_unwritten(stamp)
    bare = tmp_path / "bare.sqlite"
    sqlite3.connect(bare).close()
    with pytest.raises(RuntimeError, match="no log"):
        LinkedPopulation(bare, tmp_path / "other", log=True)
