"""The inspection benchmark group (UI-1, issue 25) on tiny sizes: it yields its figures, the
overview counts every actor on disk, each file is read with its log as a sleeping actor's is, and
inspecting evicted actors costs no activation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.bench.inspect_figures import INSPECT_FIGURES, inspect_figures


def _logs_beside(namespace_dir: Path) -> list[bool]:
    """For each actor file under ``namespace_dir``: whether a log with commits is beside it."""
    return [os.path.getsize(f"{f}-wal") > 0 for f in sorted(namespace_dir.glob("*/*.sqlite"))]


@pytest.mark.anyio
async def test_the_inspection_figures_are_measured_without_activations(tmp_path: Path) -> None:
    """UI-1: every figure of the group is there, in ms or activations; reads activated none."""
    errors: list[str] = []
    got = await inspect_figures(tmp_path, TINY, Progress(enabled=False),
                                frozenset(INSPECT_FIGURES), errors)
    assert errors == [] and [f.figure for f in got] == list(INSPECT_FIGURES)
    by = {f.figure: f for f in got}
    assert by["inspect_activations"].value == 0 and by["inspect_activations"].passed
    assert all(by[n].unit == "ms" and by[n].value > 0 for n in INSPECT_FIGURES[:4])
    # The actors listed are read as sleeping actors are: each file with its log beside it.
    assert _logs_beside(tmp_path / "inspect-node" / "actors" / "tenant_quota") == [True] * (
        TINY.restart_actors[2])
