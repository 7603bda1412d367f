"""A node killed with SIGKILL in the middle of a burst of due alarms (AL-3, AL-4, REL-1): no alarm
is lost and none takes effect twice. Each ``BenchTicker`` alarm adds one to its actor's counter and
moves its alarm a day on in the same transaction, so after the kill and a restart that fires the
rest, every counter is exactly 1 and every alarm is a day on."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import _procs
from mailbox_actors.bench.actors import REARM_MS, BenchTicker, TickInit, TickRead, ticker_name
from mailbox_actors.testing import TestRuntime

NS = BenchTicker.namespace
TENANT = "t_bench"
ACTORS = 300
KILL_AFTER = 100  # alarms the child reports fired before it is killed
DAY = 86_400_000
TESTS_DIR = Path(__file__).resolve().parents[1] / "support"


def _kill_mid_burst(data: Path) -> set[str]:
    """Run the burst's node until it reported KILL_AFTER alarms, SIGKILL it (by pid); the ids it
    reported fired."""
    with open(data / "child.log", "w") as log:
        child = subprocess.Popen([sys.executable, str(TESTS_DIR / "_burst_proc.py"), str(data)],
                                 stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            assert _procs.read_line(child) == "STARTED"
            reported = [_procs.read_line(child) for _ in range(KILL_AFTER)]
        finally:
            rest = _procs.kill(child)
    return {line.split()[1] for line in reported + rest.splitlines() if line.startswith("FIRED ")}


@pytest.mark.anyio
async def test_sigkill_during_a_burst_loses_no_alarm_and_applies_none_twice(
        tmp_path: Path) -> None:
    """AL-3, AL-4: 300 alarms due at once fire on a node on the system clock; it is killed with
    SIGKILL after 100 reported their commit; a restart fires the others. Every actor then fired
    exactly once (its counter is 1, none lost, none applied twice) and holds its next alarm."""
    now = time.time_ns() // 1_000_000
    async with TestRuntime(tmp_path, start_ms=now - 2 * DAY, objects=(BenchTicker,)) as rt:
        ids = [rt.id_from_name(NS, ticker_name(i)) for i in range(ACTORS)]
        for oid in ids:  # due a day ago on the real clock
            await rt.call(NS, oid, TickInit(alarm_at_ms=now - DAY), tenant_id=TENANT)
    fired_before = _kill_mid_burst(tmp_path)
    assert len(fired_before) >= KILL_AFTER
    restart = time.time_ns() // 1_000_000
    async with TestRuntime(tmp_path, start_ms=restart, objects=(BenchTicker,)) as rt:
        await rt.run_until_idle()
        counts = [await rt.call(NS, oid, TickRead(), tenant_id=TENANT) for oid in ids]
        assert counts == [1] * ACTORS
        for oid in ids:
            at = rt.node.scheduler.pending((NS, oid))
            assert at is not None and at >= now - DAY + REARM_MS
    assert len(fired_before) < ACTORS, "the kill should land inside the burst"
