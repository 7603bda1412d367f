"""A node's tie to its supervisor (OPS-1): a node of ``cluster`` never runs unsupervised.

Two mechanisms, because either alone has a gap: on Linux the kernel sends the node SIGTERM when the
supervisor dies (``prctl(PR_SET_PDEATHSIG)``), and everywhere the node watches its standard input, a
pipe whose only writer is the supervisor: end of file means the supervisor is gone, however it
died. Either way the node stops as on SIGTERM (draining requests in flight).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

__all__ = ["SUPERVISOR_ENV", "stop_with_supervisor"]

SUPERVISOR_ENV = "MAILBOX_ACTORS_SUPERVISOR_PID"  # set by the supervisor in each node's environment
_PR_SET_PDEATHSIG = 1


def _parent_death_signal(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_pipe(fd: int) -> None:
    def watch() -> None:
        try:
            while os.read(fd, 4096):
                pass  # the supervisor never writes; anything read is ignored
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="supervisor-lifeline", daemon=True).start()


def stop_with_supervisor(environ: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """When started by a supervisor (its pid in ``SUPERVISOR_ENV``), arrange to get SIGTERM when it
    dies; if it is already gone, send it now."""
    text = environ.get(SUPERVISOR_ENV)
    if not text or not text.isdigit():
        return
    _parent_death_signal(signal.SIGTERM)
    _watch_pipe(sys.stdin.fileno())
    if os.getppid() != int(text):  # it died before the signal was armed
        os.kill(os.getpid(), signal.SIGTERM)
