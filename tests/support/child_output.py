"""A child process's output read without Python's buffering, so select() tells the truth; and a
port for a node to bind."""

from __future__ import annotations

import os
import select
import subprocess

from mailbox_actors.testing.ports import free_port


def _port() -> int:
    return free_port()  # below the ephemeral range: not taken before the node binds it


class Lines:
    """A child's output, read without Python's buffering so select() tells the truth."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buf = b""
        self.seen: list[str] = []

    def until(self, text: str, timeout_s: float = 60) -> list[str]:
        start = len(self.seen)
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.seen.append(line.decode())
                if text in self.seen[-1]:
                    return self.seen[start:]
            ready, _, _ = select.select([self.fd], [], [], timeout_s)
            assert ready, f"no {text!r} within {timeout_s}s: {self.seen}"
            chunk = os.read(self.fd, 65536)
            assert chunk, f"the process ended before {text!r}: {self.seen}"
            self.buf += chunk
