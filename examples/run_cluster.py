"""``make run``: a three-node local cluster on the embedded SQLite default in dev mode, the web
console beside it, plus the example host service driving real traffic through the client. Each node
listens for SMTP beside HTTP (node i on SMTP_PORT+i), and its ``capture`` transport hands the mail
its identities send to its own door (UI-6): mail one identity sends to another arrives in the
other's IdentityMailbox through the cluster itself, and mail to an address of a tenant's domain
that no identity holds lands in that tenant's catch-all identity. The console (dev mode, loopback)
shows it all. Ctrl-C stops everything cleanly.

    python examples/run_cluster.py [--data ./data] [--port 8787] [--smtp-port 2525] [--nodes 3]
                                   [--console-port 8800] [--seconds 0] [--postgres local|DSN]

``make run-postgres`` is ``--postgres local``: the same cluster and traffic with the control data and
every queue in PostgreSQL (CL-7), a server of this machine's own binaries started for the run the way
the tests start theirs (``mailbox_actors.platform.postgres.local_server``: initdb into a temporary
directory, run as the postgres user under root, stopped by pid on exit).
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
from typing import Any

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


PROVIDER_INCLUDE = "_spf.provider.example"


def example_zone(tenants: int = 10) -> dict[str, Any]:
    """The DNS of the example: each tenant-N.example.com publishes what the provider asks for
    (MX, SPF with the provider's include, DKIM selector s1 by CNAME, DMARC)."""
    records: list[list[str]] = [
        [PROVIDER_INCLUDE, "TXT", "v=spf1 ip4:192.0.2.0/24 -all"],
        ["s1.dkim.provider.example", "TXT", f"v=DKIM1; k=rsa; p={EXAMPLE_DKIM_KEY}"]]
    for t in range(tenants):
        d = f"tenant-{t}.example.com"
        records += [[d, "MX", "10 mx1.provider.example"],
                    [d, "TXT", f"v=spf1 include:{PROVIDER_INCLUDE} ~all"],
                    [f"s1._domainkey.{d}", "CNAME", "s1.dkim.provider.example"],
                    [f"_dmarc.{d}", "TXT", "v=DMARC1; p=none"]]
    return {"zones": ["example.com", "provider.example"], "records": records}


EXAMPLE_DKIM_KEY = "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC5exampleKeyForTheLoopbackZone"


def start_dns(data: Path) -> tuple[subprocess.Popen[str], int]:
    """The loopback DNS server (mailbox_actors.testing.dns) serving example_zone(), and its port."""
    data.mkdir(parents=True, exist_ok=True)
    zone = data / "dns-zone.json"
    zone.write_text(json.dumps(example_zone()))
    proc = subprocess.Popen([sys.executable, "-m", "mailbox_actors.testing.dns", "--zone",
                             str(zone)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        raise SystemExit("run: the loopback DNS server did not start")
    print(f"run: loopback DNS on 127.0.0.1:{line.split()[1]} serves tenant-N.example.com",
          flush=True)
    return proc, int(line.split()[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default="./data")
    p.add_argument("--port", type=int, default=8787)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--smtp-port", type=int, default=2525,
                   help="node i's SMTP door listens on this + i (IN-5)")
    p.add_argument("--console-port", type=int, default=8800,
                   help="the web console's port (UI-4; 0: any free port)")
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    p.add_argument("--postgres", metavar="local|DSN",
                   help="keep the control data and queues in PostgreSQL: 'local' starts a server "
                   "for the run (needs the postgres extra and PostgreSQL's binaries)")
    a = p.parse_args()
    data = Path(a.data).resolve()
    server = None
    if a.postgres == "local":
        server, dsn = start_postgres()
        os.environ["MAILBOX_ACTORS_POSTGRES"] = dsn  # the cluster, its nodes and the host service
    elif a.postgres:
        os.environ["MAILBOX_ACTORS_POSTGRES"] = a.postgres
    try:
        return run(a, data)
    finally:
        if server is not None:
            server.remove()  # stopped by its pid, its temporary directory removed
            print("run: PostgreSQL stopped", flush=True)


def start_postgres() -> tuple[Any, str]:
    """A PostgreSQL server of this machine's binaries for this run, as the tests start theirs."""
    from mailbox_actors.platform.postgres.local_server import LocalPostgres, postgres_binaries
    from mailbox_actors.testing.ports import free_port

    bindir, why = postgres_binaries()
    if bindir is None:
        raise SystemExit(f"run: {why}")
    server = LocalPostgres(bindir, free_port())
    server.start()
    dsn = server.new_database("mailbox_actors")
    print(f"run: PostgreSQL {bindir.parent.name} on 127.0.0.1:{server.port} (pid "
          f"{server.proc.pid if server.proc else '?'}); control data and queues there", flush=True)
    return server, dsn


def run(a: argparse.Namespace, data: Path) -> int:
    (data / "cluster.json").unlink(missing_ok=True)
    dns, dns_port = start_dns(data)
    sup = subprocess.Popen([sys.executable, "-m", "mailbox_actors", "cluster", "--nodes",
                            str(a.nodes), "--data", str(data), "--port", str(a.port),
                            "--log-level", "warning",
                            # DomainMonitor asks the loopback DNS server that serves the example
                            # domains (DM-1): the resolver is pointed at it by settings.
                            "--dns-nameservers", "127.0.0.1", "--dns-port", str(dns_port),
                            # Every node listens for SMTP (IN-5). Dev mode (UI-6): submitted mail
                            # is captured (CA-14's SMTP transport to the node's own door), so it
                            # arrives in the recipients' IdentityMailboxes, and the door takes
                            # unknown recipients of the tenants' domains into a catch-all.
                            "--smtp-listen-port", str(a.smtp_port), "--dev",
                            "--transport", "capture"])
    host = console = None
    try:
        if not wait_for_cluster(data, sup):
            print("run: the cluster did not come up", file=sys.stderr)
            return 1
        print(f"run: cluster is up. Try:  .venv/bin/mailbox-actors status --data {a.data}",
              flush=True)
        console = subprocess.Popen([sys.executable, "-m", "mailbox_actors", "console", "--data",
                                    str(data), "--dev", "--port", str(a.console_port)],
                                   stdout=subprocess.PIPE, text=True)
        assert console.stdout is not None
        line = console.stdout.readline().strip()
        if not line.startswith("console: listening on"):
            print(f"run: the console did not start ({line or 'no output'})", file=sys.stderr)
            return 1
        url = line.split()[3]
        print(f"run: console at {url} (dev mode: mail content shown) -- sign in with the "
              f"operator token: cat {a.data}/operator.token", flush=True)
        host = subprocess.Popen([sys.executable, str(HERE / "host_service.py"), "--data",
                                 str(data), "--seconds", str(a.seconds)])
        host.wait()
        return host.returncode
    except KeyboardInterrupt:
        return 0
    finally:
        for proc in (host, console, sup):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGINT if proc is host else signal.SIGTERM)
        for proc in (host, console, sup):
            if proc is not None:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        dns.terminate()  # the DNS server, by its pid
        dns.wait(timeout=10)
        print("run: stopped", flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
