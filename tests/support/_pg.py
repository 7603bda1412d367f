"""A real PostgreSQL server for the tests, started and stopped by the test itself (by pid).

The server binaries of the machine (``/usr/lib/postgresql/*/bin`` or ``initdb`` on PATH) run
from a temporary directory on a free port on 127.0.0.1, with their Unix socket in that
directory. PostgreSQL refuses to run as root, so under root they run as the ``postgres`` user
(``setpriv``). ``find_binaries`` says why when there are none, so the tests can skip with it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

from mailbox_actors.testing.ports import free_port


def find_binaries() -> tuple[Path | None, str]:
    """The directory holding initdb and postgres, or None and the reason."""
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(cand, "initdb")) and os.path.exists(
                os.path.join(cand, "postgres")):
            return Path(cand), ""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("postgres"):
        return Path(initdb).parent, ""
    return None, "no PostgreSQL server binaries (initdb, postgres) on this machine"


def _free_port() -> int:
    return free_port()  # below the ephemeral range: not taken before the server binds it


class PgServer:
    """``listen`` and ``trust_nets`` (additive, for the fault test's bridge): more addresses to
    listen on than 127.0.0.1, and the networks (CIDR) whose clients are trusted like it."""

    def __init__(self, bindir: Path, *, listen: Sequence[str] = ("127.0.0.1",),
                 trust_nets: Sequence[str] = ()) -> None:
        self.bindir = bindir
        self.listen = tuple(listen)
        self.root = Path(tempfile.mkdtemp(prefix="ma-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._prefix: list[str] = []
        if os.geteuid() == 0:  # the server refuses root: run it as the postgres user
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                            "--clear-groups"]
        subprocess.run([*self._prefix, str(bindir / "initdb"), "-D", str(self.data), "-A",
                        "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with open(self.data / "pg_hba.conf", "a") as hba:
            for net in trust_nets:
                hba.write(f"host all all {net} trust\n")

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def dsn_at(self, host: str, dbname: str) -> str:
        """The DSN through another of the ``listen`` addresses (a machine's view of the server)."""
        return f"host={host} port={self.port} user=postgres dbname={dbname}"

    def start(self) -> None:
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            [*self._prefix, str(self.bindir / "postgres"), "-D", str(self.data), "-p",
             str(self.port), "-k", str(self.root), "-c", f"listen_addresses={','.join(self.listen)}"],
            stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while True:  # bounded: until the server accepts a connection
            try:
                psycopg.connect(self.conninfo, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("PostgreSQL did not start: "
                                       + (self.root / "server.log").read_text()[-2000:]) from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown by pid (SIGINT: sessions are ended, the data is kept)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


_DATABASES = iter(range(1, 1 << 30))


def new_database(server: PgServer, prefix: str = "t") -> str:
    """A new empty database on ``server``; its DSN."""
    name = f"{prefix}_{os.getpid()}_{next(_DATABASES)}"
    with psycopg.connect(server.conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return server.dsn(name)


def terminate_backends(server: PgServer, dsn: str) -> int:
    """``pg_terminate_backend`` every other session of ``dsn``'s database; how many."""
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(server.conninfo, autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                             "datname = %s AND pid <> pg_backend_pid()", (dbname,)).fetchall()
    return len(rows)
