"""The cluster's supervisor is told of a node's death by the process exit itself (CL-2, OPS-1):
its wait between health checks ends when a node process exits (Linux's pidfd), not a poll later,
and a node that died once is restarted without a delay (only deaths in a row back off)."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

from mailbox_actors.cli.cluster import _RESTART_BACKOFF_S, ClusterSupervisor
from mailbox_actors.node.config import NodeConfig

HOUR_S = 3_600.0  # a wait that ends only because the child exited (a hang fails the run)


def test_the_wait_ends_when_a_node_process_exits(tmp_path: Path) -> None:
    """CL-2: ``wait_for_exit`` with an hour's timeout returns once the watched child is killed."""
    sup = ClusterSupervisor(NodeConfig(data=str(tmp_path), nodes=1), out=io.StringIO())
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        sup._watch_exit(0, child.pid)
        assert sup._exits[0] is not None
        child.send_signal(signal.SIGKILL)
        sup.wait_for_exit(HOUR_S)
        assert child.wait() == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        assert child.stdin is not None
        child.stdin.close()
        sup._close_exits()


def test_a_first_death_is_restarted_at_once() -> None:
    """CL-2: the first restart waits nothing; later ones in a row back off."""
    assert _RESTART_BACKOFF_S[0] == 0.0
    assert list(_RESTART_BACKOFF_S) == sorted(_RESTART_BACKOFF_S)
