"""The supervisor's lifecycle against real processes (OPS-1): nodes die with a SIGKILLed supervisor,
one supervisor per data directory (a second is refused with exit 2 and changes nothing), ``stop``,
a node stopped with SIGSTOP is restarted like one that exited, ``status`` shows restarts and says
plainly when no cluster runs."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster_proc import Cluster
from mailbox_actors.testing.ports import free_port_block as _free_port_block

pytestmark = pytest.mark.slow


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie awaiting its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], timeout_s: float = 60) -> None:
    """Wait until every pid has ended: a pidfd (Linux 5.3+) turns readable when its process
    exits, so this waits on the event itself; the timeout only ends a broken run."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # already gone and reaped
        try:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        finally:
            os.close(fd)
        assert ready or _gone(pid), f"still running: {[p for p in pids if not _gone(p)]}"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                          text=True, timeout=120)


def test_nodes_die_with_a_sigkilled_supervisor_and_a_new_cluster_starts_on_the_directory(
        tmp_path: Path) -> None:
    """OPS-1: SIGKILL the supervisor: its nodes stop by themselves (never left running
    unsupervised), and a new ``cluster`` on the same directory starts every node at once (no lock
    held by an orphan, no restart loop)."""
    data = tmp_path / "cluster"
    first = Cluster(data, 2)
    try:
        first.wait_running()
        pids = [n["pid"] for n in first.nodes()]
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=30)
        _wait_gone(pids)
    finally:
        first.stop()
    second = Cluster(data, 2)
    try:
        second.wait_running()
        assert sum("ready at" in line for line in second.log) == 2, second.log
        assert not any("restarting" in line for line in second.log)
    finally:
        second.stop()


def test_one_supervisor_per_directory_stop_sigstop_restart_and_status(tmp_path: Path) -> None:
    """OPS-1: a second ``cluster`` on a directory in use is refused with exit 2 and leaves
    cluster.json as it was; a node stopped with SIGSTOP is killed and restarted; ``status`` shows
    its restart; ``stop --data`` stops the cluster and its nodes; then ``status`` says no cluster
    runs and ``stop`` has nothing to stop."""
    data = tmp_path / "cluster"
    c = Cluster(data, 2, extra=("--health-timeout-s", "3"))
    try:
        c.wait_running()
        before = (data / "cluster.json").read_bytes()
        other = _cli("cluster", "--nodes", "1", "--data", str(data), "--port",
                     str(_free_port_block(1)))
        assert other.returncode == 2, other
        assert "in use" in other.stderr and "mailbox-actors stop" in other.stderr
        assert (data / "cluster.json").read_bytes() == before

        victim = c.nodes()[1]
        os.kill(victim["pid"], signal.SIGSTOP)
        assert "for 3 s; killing it" in c.wait_for("has not answered /healthz")
        c.wait_for(f"{victim['name']} back")
        assert _gone(victim["pid"])
        status = _cli("status", "--data", str(data))
        assert status.returncode == 0, status
        row = next(line for line in status.stdout.splitlines() if line.startswith("node-1"))
        assert row.split()[1:4] == ["ok", str(c.nodes()[1]["pid"]), "1"], status.stdout

        pids = [n["pid"] for n in c.nodes()]
        stopped = _cli("stop", "--data", str(data))
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped
        assert c.proc.wait(timeout=60) == 0
        _wait_gone(pids)
    finally:
        c.stop()
    status = _cli("status", "--data", str(data))
    assert status.returncode == 1 and "no cluster is running" in status.stderr, status
    assert "Traceback" not in status.stderr
    again = _cli("stop", "--data", str(data))
    assert again.returncode == 0 and "nothing to stop" in again.stdout


def test_a_healthy_node_is_not_killed_for_the_time_the_supervisor_spent_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OPS-1: "has not answered /healthz for health_timeout_s" counts from the first failed probe:
    after the supervisor spent 30 s starting or restarting another node without probing this one,
    one slow answer does not kill it; probes failing for longer than the timeout do. (The clock
    and the probe's answers are fakes so the test is exact; the child is a real process.)"""
    import io

    from mailbox_actors.cli import cluster as cluster_mod
    from mailbox_actors.cli.cluster import ClusterSupervisor
    from mailbox_actors.node.config import load_config

    now = [0.0]
    monkeypatch.setattr(cluster_mod, "time", type("T", (), {
        "monotonic": staticmethod(lambda: now[0]), "sleep": staticmethod(lambda s: None)}))
    cfg = load_config({"data": str(tmp_path / "cluster"), "nodes": 1, "health_timeout_s": 10},
                      env={})
    out = io.StringIO()
    sup = ClusterSupervisor(cfg, out=out)
    answers: list[bool] = []
    monkeypatch.setattr(sup, "_answers", lambda i, p: answers.pop(0))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        sup.procs[0] = child  # type: ignore[assignment]
        sup._last_ok[0] = 0.0  # ready at t=0, then not probed while another node restarted

        def probe(at: float, answer: bool) -> None:
            now[0] = at
            answers.append(answer)
            sup.check_health()

        probe(30.0, False)  # one slow answer after the gap: not a node silent for 10 s
        assert child.poll() is None and "killing" not in out.getvalue()
        probe(31.0, True)
        for t in range(32, 44):  # failing from t=32: killed once that is over 10 s old
            probe(float(t), False)
            assert (child.poll() is None) == (t - 32 <= 10), t
        assert "node-0 (pid" in out.getvalue() and "for 10 s; killing it" in out.getvalue()
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
