"""The benchmark's large populations (``bench.population``): hard links to copies of one file, at
most LINKS_PER_SOURCE to a copy, and a check that fails once any of them was written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mailbox_actors.bench import population
from mailbox_actors.bench.figures import Progress
from mailbox_actors.bench.population import LinkedPopulation


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
