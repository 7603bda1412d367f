"""``make run`` end to end (UI-6): the example cluster in dev mode with the console beside it, its
address printed, its traffic (captured mail, the catch-all) visible there, and everything stopped
by itself at the end."""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from console_stack import REPO, Session
from mailbox_actors.testing.ports import free_port, free_port_block

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_make_run_prints_the_console_and_shows_its_dev_traffic(tmp_path: Path) -> None:
    """UI-6: run_cluster.py prints the console's address; signed in there, the example's mail is
    in the recipients' mailboxes and its copies to an unknown address of a tenant's domain are in
    that tenant's catch-all identity; the domain made to fail sends its tenant's Notifier one
    notification, which arrives in the other tenant's support mailbox (OBJ-4); the run then stops
    cleanly (exit 0)."""
    port, smtp, console = free_port_block(2), free_port_block(2), free_port()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "run_cluster.py"), "--data", str(tmp_path),
         "--nodes", "2", "--port", str(port), "--smtp-port", str(smtp), "--console-port",
         str(console), "--seconds", "12"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    printed: list[str] = []  # every line, in order (the queue's are taken as they come)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            printed.append(line.rstrip("\n"))
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        url = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            seen.append(line)
            found = re.match(r"run: console at (http://\S+/) \(dev mode", line)
            if found:
                url = found.group(1).rstrip("/")
            if url and "arrived in" in line:
                break
        assert url == f"http://127.0.0.1:{console}", "\n".join(seen[-30:])
        s = Session(url)
        s.sign_in((tmp_path / "operator.token").read_text().strip())
        status, page, _ = s.request("GET", "/actors")
        assert status == 200 and "support" in page
        # The catch-all identity is made at RCPT, its first message committed at DATA's end:
        # look until both are there (each look after the example's next line of traffic).
        inbox = ""
        deadline = time.monotonic() + 60
        while "Hello #" not in inbox and time.monotonic() < deadline:
            page = s.request("GET", "/actors")[1]
            catch_all = re.search(r'href="(/identities/idn_[0-9A-Z]+)">catch-all<', page)
            inbox = "" if catch_all is None else s.request("GET", catch_all.group(1))[1]
            if "Hello #" not in inbox:
                with contextlib.suppress(queue.Empty):
                    lines.get(timeout=2)
        assert "Hello #" in inbox, "no example mail in a catch-all identity (dev mode, UI-6)"
        assert proc.wait(timeout=90) == 0
        reader.join(timeout=10)  # it ends at the pipe's end
        told = [line for line in printed if line.startswith("notifier: ")]
        assert any(re.match(r"notifier: \S+ is failing; notifications sent [1-9]", line)
                   for line in told), "\n".join(told or printed[-30:])
        assert any(line.startswith("notifier: arrived at support@") for line in told), \
            "\n".join(told)
    finally:
        if proc.poll() is None:
            # By its pid, as Ctrl-C: run_cluster then stops its cluster, console and DNS server.
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
