"""What ships for monitoring (UI-8): Prometheus alert rules (owner mismatch at 1, dead letters above
0, a node restarting) checked and unit-tested with Debian's ``promtool``, and a Grafana dashboard
whose every query is valid PromQL over metrics a node exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import actors_for_tests as afs
from debian_packages import apt_install
from mailbox_actors.node.app import NodeApp
from mailbox_actors.testing import TestRuntime

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "prometheus" / "alerts.yml"
RULES_TEST = ROOT / "ops" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "mailbox-actors.json"


@pytest.fixture(scope="session")
def promtool() -> Iterator[str]:
    """Debian's promtool, installed (package ``prometheus``, as root) when the machine lacks it."""
    apt_install(["prometheus"], lambda: shutil.which("promtool") is not None,
                why="the alert rules' tests")
    found = shutil.which("promtool") or "/usr/bin/promtool"
    yield found


def _promtool(tool: str, *args: str) -> str:
    done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_alert_rules_are_valid_and_fire_when_they_should(promtool: str) -> None:
    """UI-8: ``promtool check rules`` accepts the rules; ``promtool test rules`` shows each alert
    (owner mismatch at the first one, dead letters above 0, a node restarting, a node down)
    firing on the series that should raise it and quiet before."""
    out = _promtool(promtool, "check", "rules", str(RULES))
    assert "SUCCESS: 4 rules found" in out
    _promtool(promtool, "test", "rules", str(RULES_TEST))
    names = set(re.findall(r"alert: (\w+)", RULES.read_text()))
    assert names == {"MailboxActorsOwnerMismatch", "MailboxActorsDeadLetters",
                     "MailboxActorsNodeRestarting", "MailboxActorsNodeDown"}
    tested = set(re.findall(r"alertname: (\w+)", RULES_TEST.read_text()))
    assert tested == names


@pytest.mark.anyio
async def test_the_dashboard_queries_are_valid_promql_over_exported_metrics(
        promtool: str, tmp_path: Path) -> None:
    """UI-8: every query of the Grafana dashboard parses as PromQL (promtool checks it as a
    recording rule) and names only metrics a node exports (its /metrics after some traffic),
    as do the alert rules."""
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    assert len(exprs) >= 15 and doc["uid"] == "mailbox-actors"
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e.replace("$instance", ".*")}
        for i, e in enumerate(exprs)]}]}
    as_rules = tmp_path / "dashboard_rules.json"  # JSON is YAML
    as_rules.write_text(json.dumps(rules))
    assert f"SUCCESS: {len(exprs)} rules found" in _promtool(promtool, "check", "rules",
                                                             str(as_rules))
    async with TestRuntime(tmp_path / "node", objects=afs.ALL_OBJECTS, control=True) as rt:
        await afs.new_scratch(rt, "a")
        app = NodeApp(rt.node, cluster_token="c" * 20, operator_token="o" * 20)
        status, body, _ = (await app("GET", "/metrics", {}, b""))[:3]
    assert status == 200
    exported = set(re.findall(r"^# TYPE (\S+) (\w+)", body.decode(), re.M))
    names = {n for n, _ in exported}
    names |= {f"{n}_bucket" for n, kind in exported if kind == "histogram"}
    used = set(re.findall(r"mailbox_actors_[a-z_]+", " ".join(exprs) + RULES.read_text()))
    assert used and used <= names, used - names
