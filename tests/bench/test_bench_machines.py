"""The benchmark's ``machines`` group (CL-8..CL-11, issue 24) at a tiny size, so it cannot rot:
three machine processes on a PostgreSQL server the group starts and stops, a local cluster beside
them, a takeover, and the epoch check on and off. No speed is asserted."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from mailbox_actors.bench import command
from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.bench.machines_figures import MACHINES_FIGURES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_machines_group_measures_every_figure(tmp_path: Path) -> None:
    """CL-11 (benchmark): every figure of the group is measured without an error; RPC across the
    machines stands beside the single cluster's of the same run, the epoch check beside the same
    writes without it, and the takeover beside its bound (TTL and a renewal period)."""
    figures, errors = anyio.run(command.measure, tmp_path, TINY, frozenset(MACHINES_FIGURES),
                                Progress(enabled=False))
    assert errors == []
    by = {f.figure: f for f in figures}
    assert sorted(by) == sorted(MACHINES_FIGURES)
    for f in figures:
        assert math.isfinite(f.value) and f.value > 0, f
    rpc, single = by["machines_rpc_calls_per_s"], by["machines_single_cluster_rpc_calls_per_s"]
    assert rpc.limit == single.value and rpc.passed in (True, False)
    on, off = by["epoch_check_state_changes_per_s"], by["epoch_check_off_state_changes_per_s"]
    assert on.limit == off.value and on.passed in (True, False)
    takeover = by["machines_takeover_ms"]
    assert takeover.limit is not None and takeover.passed in (True, False)
