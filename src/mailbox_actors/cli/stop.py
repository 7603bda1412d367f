"""``mailbox-actors stop --data DIR`` (OPS-1): stop the cluster (or single node) running on DIR.

The process holding DIR's lock is the one to stop; it gets SIGTERM, as on Ctrl-C, and stops its
nodes gracefully. The command returns once the lock is free (everything has stopped), or says that it
is still stopping when the wait is over. Exit status: 0 stopped (or nothing was running), 1 it did
not stop within ``--timeout-s``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from mailbox_actors.platform.locks import lock_holder

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default="./data",
                   help="the data directory of the cluster (or node) to stop (default ./data)")
    p.add_argument("--timeout-s", dest="timeout_s", type=float, default=60.0,
                   help="how long to wait for it to stop (default 60)")


def run(args: argparse.Namespace) -> int:
    data = Path(args.data)
    pid = lock_holder(data)
    if pid is None:
        print(f"mailbox-actors stop: no cluster or node is running on {data} (nothing to stop)")
        return 0
    if pid <= 0:
        print(f"mailbox-actors stop: {data} is locked by a process whose pid is not recorded; "
              "stop it by hand", file=sys.stderr)
        return 1
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it ended meanwhile
    except PermissionError:
        print(f"mailbox-actors stop: not allowed to signal process {pid} (another user's)",
              file=sys.stderr)
        return 1
    print(f"mailbox-actors stop: asked process {pid} to stop; waiting for it", flush=True)
    deadline = time.monotonic() + args.timeout_s
    while lock_holder(data) is not None:
        if time.monotonic() > deadline:
            print(f"mailbox-actors stop: process {pid} is still stopping after "
                  f"{args.timeout_s:g} s", file=sys.stderr)
            return 1
        time.sleep(0.05)  # an operator command polling another process's lock, not a test
    print(f"mailbox-actors stop: stopped ({data})")
    return 0
