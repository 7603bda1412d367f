"""The inbound benchmark group (PERF, SPEC section 12): SMTP ingress through the door beside a
no-op aiosmtpd with the same client, and ingest-to-wait_poll latency, measured in one run."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from mailbox_actors.bench import command
from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.bench.inbound_figures import INBOUND_FIGURES


@pytest.mark.slow
def test_inbound_figures_stand_beside_the_no_op_server(tmp_path: Path) -> None:
    """PERF (IN-5, IN-4): the group yields its four figures in order; SMTP ingress is judged
    against aiosmtpd's no-op accept rate of the same run (>= 0.5), the latencies against 50 ms;
    every probe's wait matched (the group raises otherwise)."""
    figures, errors = anyio.run(command.measure, tmp_path, TINY, frozenset(INBOUND_FIGURES),
                                Progress(enabled=False))
    assert errors == []
    assert [f.figure for f in figures] == list(INBOUND_FIGURES)
    by = {f.figure: f for f in figures}
    for f in figures:
        assert math.isfinite(f.value) and f.value > 0, f
    ingress, raw = by["smtp_ingress_per_s"], by["raw_smtpd_accepts_per_s"]
    assert ingress.limit == raw.value and ingress.target == ">= 0.5 of limit"
    assert ingress.passed in (True, False) and raw.passed is None
    assert by["ingest_to_wait_poll_p50_ms"].value <= by["ingest_to_wait_poll_p99_ms"].value
    assert by["ingest_to_wait_poll_p99_ms"].target == "< 50 ms"
