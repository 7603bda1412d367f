"""The benchmark's Post figure (SPEC section 12): produced beside the runtime's state changes/s of
the same run, with the order of every delivery checked. Tiny sizes; no speed is asserted."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from mailbox_actors.bench import command
from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.bench.post_figures import POST_FIGURES


@pytest.mark.slow
def test_post_figures_stand_beside_the_state_changes_of_the_same_run(tmp_path: Path) -> None:
    """PO-3 (benchmark): post_deliveries_per_s is measured with its limit, the runtime's state
    changes/s of the same run, and its note says the order was never broken."""
    figures, errors = anyio.run(command.measure, tmp_path, TINY, frozenset(POST_FIGURES),
                                Progress(enabled=False))
    assert errors == []
    assert [f.figure for f in figures] == list(POST_FIGURES)
    post, limit = figures
    assert math.isfinite(post.value) and post.value > 0
    assert post.limit == limit.value and post.passed in (True, False)
    assert "never broken" in (post.note or "")
