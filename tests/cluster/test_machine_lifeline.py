"""OPS-1 for ``machine``: started by a supervisor (its pid in ``MAILBOX_ACTORS_SUPERVISOR_PID``,
standard input a pipe from it), a machine stops by itself when that supervisor is SIGKILLed, as a
``serve`` node of ``cluster`` does, draining its slots rather than running unsupervised."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from machines_proc import env, slots_cmd
from mailbox_actors.cli.lifeline import SUPERVISOR_ENV
from mailbox_actors.testing.ports import free_port

pytestmark = pytest.mark.slow

# The supervisor: starts the command it is given with its own pid in SUPERVISOR_ENV and a pipe on
# the child's standard input (as cli/cluster.py does), says the child's pid, and waits.
_SUPERVISOR = (
    "import os, subprocess, sys\n"
    f"env = dict(os.environ, {SUPERVISOR_ENV}=str(os.getpid()))\n"
    "child = subprocess.Popen(sys.argv[1:], env=env, stdin=subprocess.PIPE)\n"
    "print(f'child {child.pid}', flush=True)\n"
    "child.wait()\n"
)


def _wait_exit(pid: int, timeout_s: float = 60) -> bool:
    """Whether ``pid`` ended within the bound (a pidfd turns readable at its exit)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready)
    finally:
        os.close(fd)


def test_a_machine_stops_when_its_supervisor_is_sigkilled(pg_dsn: str, tmp_path: Path) -> None:
    """OPS-1: SIGKILL the process that started ``machine`` (named in MAILBOX_ACTORS_SUPERVISOR_PID):
    the machine stops cleanly on its own ("stopping", "stopped") instead of running unsupervised."""
    made = slots_cmd(pg_dsn, "create", "--slots", "2", "--machines", "m1",
                     "--slot-failover", "local")
    assert made.returncode == 0, made.stderr
    argv = [sys.executable, "-m", "mailbox_actors", "machine", "--postgres", pg_dsn,
            "--machine", "m1", "--volumes", str(tmp_path / "volumes"), "--port", str(free_port()),
            "--lease-ttl-s", "2", "--lease-renew-s", "0.5", "--log-level", "warning",
            "--shutdown-grace-ms", "1000"]
    sup = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, *argv], env=env(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert sup.stdout is not None
    machine_pid = None
    log: list[str] = []
    try:
        for line in sup.stdout:
            log.append(line.rstrip("\n"))
            if line.startswith("child "):
                machine_pid = int(line.split()[1])
            if "listening on" in line:
                break
        assert machine_pid is not None and "listening on" in log[-1], log
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait(timeout=30)
        log.extend(line.rstrip("\n") for line in sup.stdout)  # the machine's, until it exits
        assert _wait_exit(machine_pid), f"the machine outlived its supervisor:\n{log}"
    finally:
        if machine_pid is not None and not _wait_exit(machine_pid, 0):
            os.kill(machine_pid, signal.SIGKILL)
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        sup.stdout.close()
    assert any(line.endswith("m1: stopped") for line in log), log

