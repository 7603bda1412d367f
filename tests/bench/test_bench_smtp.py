"""The SMTP figures of the benchmark (SPEC section 12, CA-8): sends/s through SmtpTransport held
against raw aiosmtplib on one reused connection to the same aiosmtpd sink, which runs in a child
process the bench starts and stops. No speed is asserted: only that the figures are measured, in
their documented shape, and nothing is left running."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from mailbox_actors.bench import command
from mailbox_actors.bench.figures import TINY, Progress
from mailbox_actors.bench.smtp_figures import (
    SMTP_FIGURES,
    raw_smtp_sends,
    spawn_smtp_sink,
    stop_smtp_sink,
)


def test_smtp_figures_beside_raw_aiosmtplib(tmp_path: Path) -> None:
    """The transport's sends/s has raw aiosmtplib's as its limit and a 0.7 target; p99 has none."""
    figures, errors = anyio.run(command.measure, tmp_path, TINY, frozenset(SMTP_FIGURES),
                                Progress(enabled=False))
    assert errors == []
    by = {f.figure: f for f in figures}
    assert [f.figure for f in figures] == list(SMTP_FIGURES)
    for f in figures:
        assert math.isfinite(f.value) and f.value > 0, f
    ours, raw = by["smtp_transport_sends_per_s"], by["raw_smtp_sends_per_s"]
    assert ours.limit == raw.value and ours.target == ">= 0.7 of limit"
    assert ours.passed in (True, False) and raw.passed is None
    assert by["smtp_transport_p99_ms"].passed is None


@pytest.mark.anyio
async def test_raw_sends_reach_a_spawned_sink() -> None:
    """raw_smtp_sends (the limit the Carrier's dispatch figure uses) sends on one connection to a
    sink in its own process; the sink is stopped by its pid."""
    proc, port = await spawn_smtp_sink()
    try:
        latencies = await raw_smtp_sends(port, 5)
        assert len(latencies) == 5 and all(t > 0 for t in latencies)
    finally:
        await stop_smtp_sink(proc)
    assert proc.returncode is not None
