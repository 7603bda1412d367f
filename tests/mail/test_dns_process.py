"""The loopback DNS server's process (``python -m mailbox_actors.testing.dns``), as ``make run``
starts it: it says its port, and ends quietly with exit status 0 when its parent closes its stdin,
on SIGTERM, and on the Ctrl-C that a terminal sends to the whole process group."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest


def _started() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "mailbox_actors.testing.dns"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("PORT ") and int(line.split()[1]) > 0, line
    return proc


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM", "SIGINT"])
def test_the_server_process_ends_quietly(how: str) -> None:
    proc = _started()
    try:
        if how == "stdin closed":
            assert proc.stdin is not None
            proc.stdin.close()
        else:
            proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None and not f.closed:
                f.close()
