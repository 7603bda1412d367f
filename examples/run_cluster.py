"""``make run``: a three-node local cluster on the embedded SQLite default, plus the example host
service driving real traffic through the client. Ctrl-C stops everything cleanly.

    python examples/run_cluster.py [--data ./data] [--port 8787] [--nodes 3] [--seconds 0]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def wait_for_cluster(data: Path, sup: subprocess.Popen[bytes], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    import urllib.request

    while time.monotonic() < deadline and sup.poll() is None:
        try:
            nodes = json.loads((data / "cluster.json").read_text())["nodes"]
            for n in nodes:
                with urllib.request.urlopen(n["url"] + "/healthz", timeout=1) as r:
                    if r.status != 200:
                        raise OSError
            return True
        except (OSError, ValueError, KeyError):
            time.sleep(0.1)
    return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default="./data")
    p.add_argument("--port", type=int, default=8787)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    a = p.parse_args()
    data = Path(a.data).resolve()
    (data / "cluster.json").unlink(missing_ok=True)
    sup = subprocess.Popen([sys.executable, "-m", "mailbox_actors", "cluster", "--nodes",
                            str(a.nodes), "--data", str(data), "--port", str(a.port),
                            "--log-level", "warning"])
    host = None
    try:
        if not wait_for_cluster(data, sup):
            print("run: the cluster did not come up", file=sys.stderr)
            return 1
        print(f"run: cluster is up. Try:  .venv/bin/mailbox-actors status --data {a.data}",
              flush=True)
        host = subprocess.Popen([sys.executable, str(HERE / "host_service.py"), "--data",
                                 str(data), "--seconds", str(a.seconds)])
        host.wait()
        return host.returncode
    except KeyboardInterrupt:
        return 0
    finally:
        for proc in (host, sup):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGINT if proc is host else signal.SIGTERM)
        for proc in (host, sup):
            if proc is not None:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        print("run: stopped", flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
