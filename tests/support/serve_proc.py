"""``mailbox-actors serve`` as a child process of a test: started on a free port that is not the
default one, stopped with SIGTERM (killed by pid if it does not stop), its output read unbuffered."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from child_output import Lines, _port


@contextlib.contextmanager
def serving(data: Path, *args: str, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Iterator[Lines]:
    """A node on ``data`` until the block ends; it must stop with status 0."""
    proc = subprocess.Popen([sys.executable, "-m", "mailbox_actors", "serve", "--data", str(data),
                             "--port", str(_port()), "--log-level", "warning", *args], cwd=cwd,
                            env=None if env is None else {**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = Lines(proc)
    try:
        lines.until("operator token in")
        yield lines
        proc.send_signal(signal.SIGTERM)
        lines.until("stopped")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
