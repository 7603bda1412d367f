"""The inspection benchmark group (UI-1, issue 25) on tiny sizes: it yields its figures, the
overview counts every actor on disk, and inspecting evicted actors costs no activation."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.bench.inspect_figures import INSPECT_FIGURES, inspect_figures


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
