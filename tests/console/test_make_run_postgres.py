"""``make run-postgres`` end to end (CL-7, issue 23): the example cluster and its traffic with the
control data and every queue in a PostgreSQL server of this machine's binaries that the run starts
for itself and stops by its pid at the end."""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

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
    end the run exits 0 having stopped the server by its pid."""
    port, smtp, console = free_port_block(2), free_port_block(2), free_port()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "run_cluster.py"), "--data", str(tmp_path),
         "--nodes", "2", "--port", str(port), "--smtp-port", str(smtp), "--console-port",
         str(console), "--seconds", "20", "--postgres", "local"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[str] = []
    server: tuple[int, int] | None = None  # (port, pid)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            seen.append(line)
            found = re.match(r"run: PostgreSQL \d+ on 127\.0\.0\.1:(\d+) \(pid (\d+)\)", line)
            if found:
                server = int(found.group(1)), int(found.group(2))
            if "arrived in" in line:
                break
        assert server is not None, "\n".join(seen[-30:])
        assert any(line.startswith("run: console at ") for line in seen), "\n".join(seen[-30:])
        pg_port, pg_pid = server
        assert _alive(pg_pid)
        dsn = f"host=127.0.0.1 port={pg_port} user=postgres dbname=mailbox_actors"
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            tenants, identities, events = conn.execute(
                "SELECT (SELECT count(*) FROM tenants), (SELECT count(*) FROM identities), "
                "(SELECT count(*) FROM event_index)").fetchone() or (0, 0, 0)
        assert tenants > 0 and identities > 0 and events > 0
        assert not (tmp_path / "control.sqlite").exists()
        assert proc.wait(timeout=90) == 0, "\n".join(seen[-30:])
        reader.join(timeout=30)  # to the end of its output
        while not lines.empty():
            seen.append(lines.get())
        assert "run: PostgreSQL stopped" in seen
        assert not _alive(pg_pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # by its pid, as Ctrl-C: it stops what it started
            proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
        if server is not None and _alive(server[1]):
            os.kill(server[1], signal.SIGKILL)
