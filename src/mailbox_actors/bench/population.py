"""Many actor files on disk, made and removed in seconds: for the figures that need a large
population and open none of its files for writing while they measure (the restart figures, which
open none at all, and the inspection figures, which only read).

Each actor's path is a hard link to one of a few copies of one file made through the runtime (a
file system allows so many links to one inode: ext4 65,000), so the population costs directory
entries, not data: 100,000 links are made in about 5 s and removed in about 3, where as many copies
took about 30 s to make and minutes to remove (every removed copy frees its blocks, and a file
system mounted with ``discard`` trims each). A population is read-only by contract: a write
through one link would change every actor, so ``LinkedPopulation.check_unwritten`` tells a figure
that must open nothing whether a file was written meanwhile.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from mailbox_actors.bench.figures import Progress

__all__ = ["LINKS_PER_SOURCE", "LinkedPopulation"]

LINKS_PER_SOURCE = 50_000  # below ext4's 65,000 links per inode, with room


class LinkedPopulation:
    """Actor files at ``paths``, each a hard link to a copy of ``template`` kept in ``sources``
    (a directory of this population's own, on the same file system). With ``log``, the
    template's log (``-wal``) is linked beside each file as its own: a sleeping actor keeps the
    log of its last commits (up to ``WAL_KEEP_BYTES``, ``close_connection``), and a reader of
    its file reads that log too."""

    def __init__(self, template: Path, sources: Path, *, log: bool = False) -> None:
        self.template = template
        self.sources = sources
        self.log = log
        if log and not (os.path.exists(f"{template}-wal")
                        and os.path.getsize(f"{template}-wal")):
            raise RuntimeError(f"the template {template.name} has no log to link")
        self._copies: list[Path] = []
        self.count = 0

    def link(self, paths: Iterable[Path], total: int, progress: Progress) -> int:
        """Link every path (its directory made when missing), ``total`` of them as far as
        progress says; answers how many."""
        self.sources.mkdir(parents=True, exist_ok=True)
        made: set[Path] = set()
        n = 0
        for dest in paths:
            if n % LINKS_PER_SOURCE == 0:
                copy = self.sources / f"{len(self._copies)}.sqlite"
                shutil.copyfile(self.template, copy)
                if self.log:
                    shutil.copyfile(f"{self.template}-wal", f"{copy}-wal")
                self._copies.append(copy)
            if dest.parent not in made:
                dest.parent.mkdir(parents=True, exist_ok=True)
                made.add(dest.parent)
            os.link(self._copies[-1], dest)
            if self.log:
                os.link(f"{self._copies[-1]}-wal", f"{dest}-wal")
            n += 1
            progress.tick("  linked {:,}/{:,} actor files", n, total)
        self.count += n
        return n

    def stamp(self) -> list[tuple[int, int]]:
        """The copies' modification times and sizes, their logs' too (for ``check_unwritten``)."""
        files = [p for c in self._copies for p in ((c, Path(f"{c}-wal")) if self.log else (c,))]
        return [(st.st_mtime_ns, st.st_size) for st in (p.stat() for p in files)]

    def check_unwritten(self, before: list[tuple[int, int]]) -> None:
        """Raise unless no actor file was written since ``before`` (``stamp``)."""
        if self.stamp() != before:
            raise RuntimeError(f"an actor file under {self.sources} was written while the "
                               "figure measured: every link shares it, so the population is "
                               "no longer what the figure describes")

