"""The benchmark's Carrier rows (PERF, SPEC section 12) at the tiny size: every figure measured,
each beside the limit taken in the same run, and the SMTP sink it started stopped."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from mailbox_actors.bench import command
from mailbox_actors.bench.carrier_figures import CARRIER_FIGURES
from mailbox_actors.bench.figures import TINY, Progress


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_carrier_figures_stand_beside_their_limits(tmp_path: Path) -> None:
    """submit_per_s is judged against the runtime's state changes of the same run (0.5),
    dispatches_per_s against raw aiosmtplib to the same sink (0.7), the p99 against 50 ms."""
    figures, errors = anyio.run(command.measure, tmp_path, TINY, frozenset(CARRIER_FIGURES),
                                Progress(enabled=False))
    assert errors == []
    assert [f.figure for f in figures] == list(CARRIER_FIGURES)
    by = {f.figure: f for f in figures}
    for f in figures:
        assert math.isfinite(f.value) and f.value > 0, f
    assert by["submit_per_s"].limit == by["carrier_state_changes_per_s"].value
    assert by["submit_per_s"].target == ">= 0.5 of limit"
    assert by["dispatches_per_s"].limit == by["carrier_raw_smtp_sends_per_s"].value
    assert by["dispatches_per_s"].target == ">= 0.7 of limit"
    assert by["submit_to_accepted_p99_ms"].target == "< 50 ms"
    assert by["submit_to_accepted_p99_ms"].passed in (True, False)
