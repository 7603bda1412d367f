"""A local PostgreSQL server of this machine's own binaries, for the benchmark, ``make
run-postgres`` and the test suite (CL-7; a development tool, never used by a node): ``initdb`` into
a temporary directory, ``postgres`` on a given free port of 127.0.0.1 (and any more addresses
given) with its Unix socket in that directory (as the ``postgres`` user under root: the server
refuses root), stopped by pid. The tests' ``tests/support/_pg.py`` is this class on a free port."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["LocalPostgres", "postgres_binaries"]


def postgres_binaries() -> tuple[Path | None, str]:
    """The directory holding initdb and postgres, or None and why."""
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(cand, "initdb")) and os.path.exists(
                os.path.join(cand, "postgres")):
            return Path(cand), ""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("postgres"):
        return Path(initdb).parent, ""
    return None, "no PostgreSQL server binaries (initdb, postgres) on this machine"


class LocalPostgres:
    """``with LocalPostgres(bindir, port) as pg: dsn = pg.new_database("x")``.

    ``listen`` and ``trust_nets``: more addresses to listen on than 127.0.0.1, and the networks
    (CIDR) whose clients are trusted like it (the fault test's bridge); ``settings``, more of the
    server's settings (``-c name=value``); ``parent``, the directory its temporary directory is
    made in (the system's temporary directory by default). Every client is trusted
    without a password: a server for this machine's own tests and demos only."""

    def __init__(self, bindir: Path, port: int, *, listen: Sequence[str] = ("127.0.0.1",),
                 trust_nets: Sequence[str] = (), settings: Mapping[str, str] | None = None,
                 parent: Path | None = None) -> None:
        self.bindir = bindir
        self.settings = dict(settings or {})  # more ``-c name=value`` of the server
        self.listen = tuple(listen)
        self.root = Path(tempfile.mkdtemp(prefix="ma-pg-", dir=parent))
        self.data = self.root / "data"
        self.port = port  # a free one (the caller's way of finding one)
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

    def dsn(self, dbname: str = "postgres") -> str:
        return self.dsn_at("127.0.0.1", dbname)

    def dsn_at(self, host: str, dbname: str) -> str:
        """The DSN through another of the ``listen`` addresses (a machine's view of the server)."""
        return f"host={host} port={self.port} user=postgres dbname={dbname}"

    @property
    def conninfo(self) -> str:
        """The DSN of the server's own ``postgres`` database (for administration)."""
        return self.dsn()

    def start(self) -> None:
        import psycopg

        with open(self.root / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*self._prefix, str(self.bindir / "postgres"), "-D", str(self.data), "-p",
                 str(self.port), "-k", str(self.root), "-c",
                 f"listen_addresses={','.join(self.listen)}",
                 *(a for k, v in self.settings.items() for a in ("-c", f"{k}={v}"))],
                stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while True:  # bounded: until the server accepts a connection
            try:
                psycopg.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("PostgreSQL did not start: "
                                       + (self.root / "server.log").read_text()[-2000:]) from None
                time.sleep(0.05)

    def new_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        """Fast shutdown by pid (SIGINT: sessions are ended, the data is kept), SIGKILL after
        30 s."""
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
        """Stopped and started again: the same data, the same port."""
        self.stop()
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
