"""The benchmark's ``postgres`` group (CL-7, issue 23) at a tiny size, so it cannot rot: a server of
this machine's binaries started and stopped by the group, events through a cluster on each backend,
and cluster RPC with the control data on PostgreSQL beside SQLite. No speed is asserted."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from mailbox_actors.bench import command
from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.bench.postgres_figures import POSTGRES_FIGURES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_postgres_group_measures_both_backends_in_one_run(tmp_path: Path) -> None:
    """CL-7 (benchmark): every figure of the group is measured without an error; each PostgreSQL
    figure stands beside its SQLite limit of the same run (events, RPC) or its fixed bound (p99),
    and says where it was measured; no server is left running (the group stops its own)."""
    figures, errors = anyio.run(command.measure, tmp_path, TINY, frozenset(POSTGRES_FIGURES),
                                Progress(enabled=False))
    assert errors == []
    by = {f.figure: f for f in figures}
    assert [f.figure for f in figures] == list(POSTGRES_FIGURES)
    for f in figures:
        assert math.isfinite(f.value) and f.value > 0, f
    assert by["pg_events_per_s"].limit == by["pg_sqlite_events_per_s"].value
    assert by["pg_cluster_rpc_calls_per_s"].limit == by["pg_sqlite_cluster_rpc_calls_per_s"].value
    for name in ("pg_events_per_s", "pg_event_latency_p99_ms", "pg_cluster_rpc_calls_per_s"):
        assert by[name].passed in (True, False)
        assert "PostgreSQL" in (by[name].note or "")
    assert "NOT received" not in (by["pg_events_per_s"].note or "")
