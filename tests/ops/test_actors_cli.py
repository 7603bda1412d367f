"""Your own objects and inspection from the command line against real processes (UI-1, UI-7):
``serve`` and ``cluster`` load ``--objects package.module:Class``; ``actors`` lists, shows and pages
them read-only; ``status`` and every command find a single node on whatever port it listens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_proc import Cluster
from serve_proc import serving

ROOT = Path(__file__).resolve().parents[2]
COUNTER = ROOT / "examples" / "counter_project"


def _cli(*args: str, cwd: Path = COUNTER, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env={**os.environ, **(env or {})})


def _ok(*args: str, **kw: Any) -> str:
    done = _cli(*args, **kw)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One ``serve`` node on a port that is not the default, serving the counter project's
    Counter, started from the project's directory."""
    data = tmp_path_factory.mktemp("single") / "node"
    with serving(data, "--objects", "counter:Counter", cwd=COUNTER):
        yield data
    assert not (data / "node.json").exists()  # removed when the node stops


def test_status_and_calls_find_a_single_node_on_a_non_default_port(node: Path) -> None:
    """The status defect of issue 25: a single ``serve`` node records where it listens in its data
    directory, so ``status --data`` reports it up (not unreachable at 8787), and ``call`` finds it
    too."""
    recorded = json.loads((node / "node.json").read_text())
    assert not recorded["url"].endswith(":8787")
    out = json.loads(_ok("status", "--data", str(node), "--json"))
    assert [(n["status"], n["url"]) for n in out["nodes"]] == [("ok", recorded["url"])]
    got = json.loads(_ok("call", "counter", "c-status", '{"op":"start"}', "--tenant", "t1",
                         "--data", str(node)))
    assert got == {"ok": {"created": True}}


def test_actors_commands_inspect_a_users_object_read_only(node: Path) -> None:
    """UI-1, UI-7: the user's Counter served by ``--objects``; ``actors namespaces|list|show|rows|
    kv|outbox`` show it (tables, or JSON with --json), by id or by name, without activating it;
    a bad cursor or namespace is an invalid_request answer (exit 1), a bad limit a usage error."""
    for name in ("c1", "c2", "c3"):
        _ok("call", "counter", name, '{"op":"start"}', "--tenant", "t1", "--data", str(node))
    _ok("call", "counter", "c1", '{"op":"add","n":5}', "--tenant", "t1", "--data", str(node))
    counts = json.loads(_ok("actors", "namespaces", "--data", str(node), "--json"))
    assert {c["namespace"]: c["actors"] for c in counts["namespaces"]}["counter"] >= 3
    first = json.loads(_ok("actors", "list", "counter", "--limit", "2", "--data", str(node),
                           "--json"))
    assert len(first["actors"]) == 2 and first["next_cursor"]
    # --cursor=VALUE: a cursor may begin with "-" (base64url), which argparse would take for a flag
    rest = json.loads(_ok("actors", "list", "counter", "--all", "--limit", "2",
                          f"--cursor={first['next_cursor']}", "--data", str(node), "--json"))
    ids = [a["id"] for a in first["actors"] + rest["actors"]]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) >= 3
    assert all(a["tenant"] == "t1" and a["schema_version"] == 1 for a in first["actors"])
    table = _ok("actors", "list", "counter", "--data", str(node))
    assert table.splitlines()[0].split()[:4] == ["id", "name", "tenant", "node"]

    shown = json.loads(_ok("actors", "show", "counter", "c1", "--data", str(node), "--json"))
    assert shown["meta"]["owner_tenant"] == "t1" and shown["alarm"]["at_ms"] is not None
    # The runtime's outbox is shown once, by its counts, not among the object's own tables.
    assert [(t["name"], t["rows"]) for t in shown["tables"]] == [("meta", 1)]
    assert (shown["outbox_pending"], shown["outbox_dispatched"]) == (0, 0)
    assert "alarm" in _ok("actors", "show", "counter", shown["id"], "--data", str(node))
    rows = json.loads(_ok("actors", "rows", "counter", "c1", "meta", "--data", str(node),
                          "--json"))
    assert rows["rows"] == [["total", 5]]
    assert "total" in _ok("actors", "rows", "counter", "c1", "meta", "--data", str(node))
    assert json.loads(_ok("actors", "kv", "counter", "c1", "--data", str(node),
                          "--json"))["entries"] == []
    assert json.loads(_ok("actors", "outbox", "counter", "c1", "--data", str(node),
                          "--json"))["events"] == []

    for args in (("actors", "list", "counter", "--cursor", "forged"),
                 ("actors", "list", "nope"),
                 ("actors", "rows", "counter", "c1", "no_table")):
        done = _cli(*args, "--data", str(node))
        assert done.returncode == 1 and "invalid_request" in done.stderr, done
    done = _cli("actors", "list", "counter", "--limit", "0", "--data", str(node))
    assert done.returncode == 2 and "--limit" in done.stderr
    done = _cli("actors", "rows", "counter", "c1", "meta", "--content", "--data", str(node))
    assert done.returncode == 1 and "permission_denied" in done.stderr


def test_a_bad_objects_setting_is_refused_at_start(tmp_path: Path) -> None:
    """UI-7, CL-4: an entry that does not import, is not an Actor, takes a served namespace or is
    not package.module:Class stops serve with status 2 naming the setting."""
    for spec in ("nope_module:X", "counter:DAY_MS", "counter", "mailbox_actors.objects:"
                 "TenantQuota"):
        done = _cli("serve", "--data", str(tmp_path / "d"), "--port", "0", "--objects", spec)
        assert done.returncode == 2 and "'objects'" in done.stderr, (spec, done.stderr)


@pytest.mark.slow
def test_the_counter_project_runs_in_a_local_cluster(tmp_path: Path) -> None:
    """UI-7: ``cluster --objects counter:Counter`` (also from the TOML file) serves the counter
    project's actor on every node; calls reach it wherever its id lives; the listing gathers them
    from every node; ``openapi.json`` has its requests."""
    config = tmp_path / "cluster.toml"
    config.write_text('objects = ["counter:Counter"]\n')
    cluster = Cluster(tmp_path / "c", 2, extra=("--config", str(config)),
                      env={"PYTHONPATH": str(COUNTER)})
    try:
        cluster.wait_running()
        data = str(tmp_path / "c")
        for i in range(8):
            _ok("call", "counter", f"n{i}", '{"op":"start"}', "--tenant", "t1", "--data", data)
        got = json.loads(_ok("call", "counter", "n3", '{"op":"add","n":2}', "--tenant", "t1",
                             "--data", data))
        assert got == {"ok": {"total": 2}}
        listed = json.loads(_ok("actors", "list", "counter", "--data", data, "--json"))
        assert len(listed["actors"]) == 8
        assert {a["node"] for a in listed["actors"]} == {"node-0", "node-1"}
        doc = json.loads(_ok("openapi", "--objects", "counter:Counter"))
        assert "CounterEnvelope" in doc["components"]["schemas"]
        nodes = json.loads((tmp_path / "c" / "cluster.json").read_text())["nodes"]

        with urllib.request.urlopen(nodes[1]["url"] + "/openapi.json", timeout=30) as r:
            served = json.loads(r.read())
        assert "CounterEnvelope" in served["components"]["schemas"]
        assert any("counter" in p for p in served["paths"])
    finally:
        cluster.stop()
