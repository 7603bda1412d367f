"""``make run-postgres`` end to end (CL-7, issue 23): the example cluster and its traffic with the
control data and every queue in a PostgreSQL server of this machine's binaries that the run starts
for itself and stops by its pid at the end."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from child_output import Lines
from console_stack import REPO
from mailbox_actors.testing.ports import free_port, free_port_block

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_the_make_target_is_the_example_on_a_local_server() -> None:
    """What ``make run-postgres`` runs is what the test below runs (with its own ports)."""
    recipe = (REPO / "Makefile").read_text().split("\nrun-postgres:", 1)[1].splitlines()[1]
    assert shlex.split(recipe)[1:] == ["examples/run_cluster.py", "--postgres", "local"]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_make_run_postgres_keeps_the_shared_state_in_its_own_server_and_stops_it(
        tmp_path: Path) -> None:
    """CL-7: run_cluster.py --postgres local starts PostgreSQL (its port and pid printed), the
    cluster comes up on it with the example's mail traffic flowing, the tenants, identities and
    indexed events are rows of that server's database (no control.sqlite is written), and at the
    end (Ctrl-C, the way ``make run-postgres``, which runs until then, is stopped) the run exits 0
    having stopped the server by its pid."""
    port, smtp, console = free_port_block(2), free_port_block(2), free_port()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "run_cluster.py"), "--data", str(tmp_path),
         "--nodes", "2", "--port", str(port), "--smtp-port", str(smtp), "--console-port",
         str(console), "--postgres", "local"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ,
                                                               "PYTHONUNBUFFERED": "1"})
    lines = Lines(proc)
    pg_pid = None
    try:
        seen = "\n".join(lines.until("arrived in", timeout_s=120))
        found = re.search(r"run: PostgreSQL \d+ on 127\.0\.0\.1:(\d+) \(pid (\d+)\)", seen)
        assert found is not None and "run: console at " in seen, seen
        pg_port, pg_pid = int(found.group(1)), int(found.group(2))
        assert _alive(pg_pid)
        dsn = f"host=127.0.0.1 port={pg_port} user=postgres dbname=mailbox_actors"
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            tenants, identities, events = conn.execute(
                "SELECT (SELECT count(*) FROM tenants), (SELECT count(*) FROM identities), "
                "(SELECT count(*) FROM event_index)").fetchone() or (0, 0, 0)
        assert tenants > 0 and identities > 0 and events > 0
        assert not (tmp_path / "control.sqlite").exists()
        proc.send_signal(signal.SIGINT)  # by its pid, as Ctrl-C: it stops what it started
        stopping = "\n".join(lines.until("run: PostgreSQL stopped", timeout_s=90))
        assert proc.wait(timeout=30) == 0
        # Exit 0 is what run_cluster.py answers to Ctrl-C whatever its parts did: that none of
        # them (the host service's traffic on PostgreSQL, the nodes, the console) failed is
        # read from what they printed.
        assert "Traceback" not in seen + stopping, seen + stopping
        assert not _alive(pg_pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # by its pid, as Ctrl-C: it stops what it started
            proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
        if pg_pid is not None and _alive(pg_pid):
            os.kill(pg_pid, signal.SIGKILL)
