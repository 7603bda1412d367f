"""``mailbox-actors domain add|check|status`` on a running cluster whose resolver is pointed, by
settings, at a DNS server on loopback that the test starts (DM-1, DM-4, DM-5)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_proc import Cluster
from mailbox_actors.testing.dns import LoopbackDns

pytestmark = pytest.mark.slow


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def dns() -> Iterator[LoopbackDns]:
    with LoopbackDns() as server:
        server.set("shop.example", "MX", "10 mx1.provider.net")
        server.set("shop.example", "TXT", "v=spf1 include:_spf.provider.net -all")
        server.set("_spf.provider.net", "TXT", "v=spf1 ip4:192.0.2.0/24 -all")
        server.set("_dmarc.shop.example", "TXT", "v=DMARC1; p=reject")
        server.set("s1._domainkey.shop.example", "TXT", "v=DKIM1; p=AAAB")
        yield server


def test_domain_add_check_and_status_from_the_command_line(dns: LoopbackDns,
                                                            tmp_path: Path) -> None:
    """DM-5: ``domain add`` registers the domain and inits its monitor, ``domain check`` runs the
    checks now against the cluster's configured nameserver and prints verified, ``domain status``
    prints each record's result, the control database's row becomes verified (DM-4); a domain never
    added is exit 2, a bad name exit 1 with invalid_request."""
    cluster = Cluster(tmp_path / "c", 1, extra=("--dns-nameservers", "127.0.0.1",
                                                "--dns-port", str(dns.port)))
    try:
        cluster.wait_running()
        data = str(cluster.data)
        tenant = json.loads(cli("tenant", "create", "shop", "--data", data).stdout)
        added = cli("domain", "add", "Shop.Example", "--tenant", tenant["id"], "--spf-include",
                    "_spf.provider.net", "--dkim-selector", "s1", "--mx", "mx1.provider.net",
                    "--data", data)
        assert added.returncode == 0, added.stderr
        row = json.loads(added.stdout)
        assert row["name"] == "shop.example" and len(row["monitor_id"]) == 64
        checked = cli("domain", "check", "shop.example", "--data", data)
        assert checked.returncode == 0, checked.stderr
        reply = json.loads(checked.stdout)
        assert (reply["state"], reply["verdict"]) == ("verified", "pass")
        status = cli("domain", "status", "shop.example", "--data", data)
        assert status.returncode == 0 and "shop.example  verified" in status.stdout
        assert "dkim   pass" in status.stdout and "spf_ok" in status.stdout
        deadline = time.monotonic() + 30  # the outbox dispatches the event in the background
        while time.monotonic() < deadline:  # the row, not a CLI process per look (seconds each)
            with sqlite3.connect(cluster.data / "control.sqlite") as conn:
                state = conn.execute("SELECT state FROM domains WHERE name = 'shop.example'"
                                     ).fetchone()[0]
            if state == "verified":
                break
            time.sleep(0.1)
        doc = json.loads(cli("domain", "status", "shop.example", "--json", "--data", data).stdout)
        assert state == "verified" and doc["state"] == "verified"
        missing = cli("domain", "status", "other.example", "--data", data)
        assert missing.returncode == 2 and "add it first" in missing.stderr
        bad = cli("domain", "add", "not a domain", "--tenant", tenant["id"], "--data", data)
        assert bad.returncode == 1 and "invalid_request" in bad.stderr
    finally:
        cluster.stop()
