"""Metrics (OPS-10) from a real ``serve`` process, read with Prometheus' own text parser: every
name carries the ``mailbox_actors_`` prefix, counters without labels export 0 from the first
scrape, the process's memory, descriptors and CPU are there, and every metric the code declares is
recorded somewhere."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from child_output import Lines, _port

SRC = Path(__file__).resolve().parents[2] / "src" / "mailbox_actors"


def _scrape(port: int) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(text)}


def test_metrics_parse_with_the_prefix_zeros_and_process_metrics(tmp_path: Path) -> None:
    """OPS-10: /metrics of a fresh node parses with prometheus_client; every family is named
    mailbox_actors_*; each unlabelled counter has a 0 sample before anything happened; resident
    memory, open descriptors, the descriptor limit and CPU seconds are reported; after requests,
    http_responses_total counts them by status."""
    port = _port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mailbox_actors", "serve", "--data", str(tmp_path / "node"),
         "--port", str(port), "--log-level", "error"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    try:
        Lines(proc).until("operator token")
        families = _scrape(port)
        assert families and all(name.startswith("mailbox_actors_") for name in families), \
            sorted(families)
        for counter in ("rpc_forwarded", "webhooks_delivered", "webhooks_retried",
                        "webhooks_failed", "webhooks_deferred"):
            assert families[f"mailbox_actors_{counter}"] == [
                (f"mailbox_actors_{counter}_total", {}, 0.0)], counter
        for gauge in ("process_resident_memory_bytes", "process_open_fds", "process_max_fds"):
            [(_, labels, value)] = families[f"mailbox_actors_{gauge}"]
            assert labels == {} and value > 0, (gauge, value)
        [(_, _, cpu)] = families["mailbox_actors_process_cpu_seconds"]
        assert cpu > 0
        for _ in range(3):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10).close()
        responses = {s[1]["code"]: s[2] for s in _scrape(port)["mailbox_actors_http_responses"]}
        assert responses["200"] >= 4  # three /healthz and the first scrape
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_every_declared_metric_is_recorded_somewhere() -> None:
    """OPS-10: a metric with HELP text that nothing records would be a promise the node never
    keeps: each name given to describe() is also given to inc/observe/set_gauge somewhere in the
    source (scrape-time values, register_gauge_fn, record themselves)."""
    text = "\n".join(p.read_text() for p in SRC.rglob("*.py"))
    declared = set(re.findall(r'describe\(\s*"([a-z_]+)"', text))
    declared |= set(re.findall(r'\("(webhooks_[a-z_]+_total)", "', text))  # described in a loop
    assert {"http_responses_total", "rpc_requests_total", "webhooks_delivered_total"} <= declared
    for name in sorted(declared):
        used = re.search(r'\.(?:inc|observe|set_gauge|_inc)\(\s*"' + name + '"', text)
        assert used, f"{name} is declared but never recorded"
