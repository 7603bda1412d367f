"""What a node start says (OPS-8, issue 28 item 3): the built-in id secret is warned about once per
process, not at every node a program starts; every line a node logs names it; and the benchmark's
progress shows log lines as readable text, never JSON, wherever its standard error goes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from mailbox_actors.node import Node
from mailbox_actors.node import node as node_module
from mailbox_actors.runtime.settings import RuntimeSettings


@pytest.mark.anyio
async def test_the_builtin_id_secret_is_warned_about_once_per_process(tmp_path: Path) -> None:
    """OPS-8: two nodes on the built-in secret, one after the other, in one process: one
    ``id_secret_builtin`` warning; a node given its own secret says nothing of it."""
    node_module._warned_builtin_secret.clear()  # as in a fresh process
    with structlog.testing.capture_logs() as logs:
        for name in ("a", "b"):
            async with Node(RuntimeSettings(data_dir=str(tmp_path / name))):
                pass
    assert [e["log_level"] for e in logs if e["event"] == "id_secret_builtin"] == ["warning"]
    node_module._warned_builtin_secret.clear()
    with structlog.testing.capture_logs() as logs:
        async with Node(RuntimeSettings(data_dir=str(tmp_path / "c"), id_secret="s" * 32)):
            pass
    assert not [e for e in logs if e["event"] == "id_secret_builtin"]


@pytest.mark.anyio
async def test_every_line_a_node_logs_names_it(tmp_path: Path) -> None:
    """Issue 28 item 3: the nodes of a cluster share one terminal, so each line a node logs from
    its start to its stop (alarm index loaded and rebuilt in the background included) says which
    node it is."""
    with structlog.testing.capture_logs() as logs:
        async with Node(RuntimeSettings(data_dir=str(tmp_path), node_name="node-7",
                                        id_secret="s" * 32)) as node:
            await node.alarms_loaded.wait()
    events = {e["event"] for e in logs}
    assert {"node_started", "alarm_index_loaded", "alarm_index_rebuilt", "node_stopped"} <= events
    assert [e["event"] for e in logs if e.get("node") != "node-7"] == []


@pytest.mark.slow
def test_the_bench_progress_has_readable_log_lines_not_json(tmp_path: Path) -> None:
    """Issue 28 item 3: a bench run whose standard error is a file (not a terminal) shows the
    runtime's warnings among its progress as readable lines; no line of it is JSON."""
    # The cheapest figure whose group runs the runtime (6 s here; cold_activation_us took 12-28).
    done = subprocess.run([sys.executable, "-m", "mailbox_actors", "bench", "--quick", "--only",
                           "state_changes_per_s", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    warned = [line for line in lines if "id_secret_builtin" in line]
    assert len(warned) == 1 and "warning" in warned[0], lines
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            continue
        raise AssertionError(f"a JSON line in the bench's progress: {line}")
