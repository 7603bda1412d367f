"""The peer comparison's driver (bench/peers/peers.py, issue 28): it reads the benchmark's JSON
lines, tabulates rounds, and refuses to start without npm, saying so. Nothing here installs or runs
a peer (no network, no npm): `make peers` does that."""

from __future__ import annotations

import importlib.util
import io
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mailbox_actors.bench import command
from mailbox_actors.bench.figures import figure

DRIVER = Path(__file__).resolve().parents[2] / "bench" / "peers" / "peers.py"


def _driver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("peers_driver", DRIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and annotations look their module up
    spec.loader.exec_module(module)
    return module


def test_reads_the_benchmarks_json_lines() -> None:
    """The driver reads what `bench --json` writes (the command's own writer), and says which
    figure a run did not give."""
    peers = _driver()
    figures = [figure(name, 100.0 + i, "ms") for i, name in enumerate(peers.OURS_FIGURES)]
    out = io.StringIO()
    command._write(figures, True, out)
    got = peers.parse_ours(["[  1.0s] bench: done in 1.0 s", *out.getvalue().splitlines()])
    assert got["alarm_burst_per_s"] == 100.0
    assert got["serve_start_to_first_answer_ms"] == 100.0 + peers.OURS_FIGURES.index(
        "serve_start_to_first_answer_ms")
    out = io.StringIO()
    command._write(figures[1:], True, out)
    with pytest.raises(RuntimeError, match=peers.OURS_FIGURES[0]):
        peers.parse_ours(out.getvalue().splitlines())


def test_tabulates_medians_and_the_ratio_to_raw() -> None:
    peers = _driver()
    rounds = [{"ours": {"alarm_burst_per_s": 2000.0 * k, "raw_burst_tx_per_s": 8000.0,
                        "alarm_burst_lateness_p99_ms": 100.0, "start_to_first_answer_ms": 500.0,
                        "runtime_libraries_start_ms": 300.0, "cold_alarms_per_s": 1200.0,
                        "raw_open_write_close_per_s": 4000.0},
               "workerd": {"alarm_burst_per_s": 1000.0 * k, "alarm_burst_lateness_p99_ms": 50.0,
                           "start_to_first_answer_ms": 50.0, "cold_alarms_per_s": 400.0 * k}}
              for k in (1, 2, 3)]
    rows = {r["figure"]: r for r in peers.summarize(rounds)}
    assert rows["alarm_burst_per_s"]["ours"] == 4000.0
    assert rows["alarm_burst_per_s"]["ratio"] == 2.0
    assert rows["alarm_burst_per_raw"]["workerd"] == 0.25
    # On cold objects each side's rate is set beside raw open, write and close of ours' round.
    assert rows["cold_alarms_per_s"]["ratio"] == 1.5
    assert rows["cold_alarms_per_raw"]["ours"] == 0.3
    assert rows["cold_alarms_per_raw"]["workerd"] == 0.2
    assert rows["start_to_first_answer_ms"]["miniflare"] is None
    table = peers.format_table(list(rows.values()))
    assert table.splitlines()[0].split() == ["figure", "unit", "ours", "workerd", "Miniflare",
                                             "ours/workerd"]


def test_refuses_to_start_without_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """With node on PATH and no npm, it exits 2 and says what to install, before any work."""
    peers = _driver()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "node").write_text("#!/bin/sh\nexit 0\n")
    os.chmod(bin_dir / "node", 0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("MAILBOX_ACTORS_PEERS_CACHE", str(tmp_path / "cache"))
    assert peers.main(["--peers-only"]) == 2
    err = capsys.readouterr().err
    assert "npm is not on PATH" in err and "install Node.js" in err
    assert not (tmp_path / "cache").exists()
