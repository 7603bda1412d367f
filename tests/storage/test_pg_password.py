"""The PostgreSQL password stays off every command line (CL-7): a server that asks for one (SCRAM)
started by the test by pid; the cluster run with a DSN that names no password and libpq's password
file (``PGPASSFILE``, the documented way), or with the whole DSN in ``MAILBOX_ACTORS_POSTGRES``;
``/proc/PID/cmdline`` of the supervisor and of every node it spawned is read for the password. A
wrong password stops a command with exit 2 naming the setting, the password never printed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from _pg import PgServer, serving
from cluster_proc import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PASSWORD = "pw-Xq7-never-on-argv"
USER = "ma_user"
_DBS = iter(range(1, 1 << 20))


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    """A server where ``USER`` must give its password over TCP (everyone else is trusted)."""
    with serving() as server:
        with psycopg.connect(server.conninfo, autocommit=True) as admin:
            admin.execute("SET password_encryption = 'scram-sha-256'")
            admin.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
        hba = server.data / "pg_hba.conf"
        hba.write_text(f"host all {USER} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        with psycopg.connect(server.conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_reload_conf()")
        yield server


@pytest.fixture
def dsn(pg: PgServer) -> str:
    """A new database of ``USER``'s; its DSN without the password."""
    name = f"secret_{next(_DBS)}"
    with psycopg.connect(pg.conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} OWNER {USER}")
    return f"host=127.0.0.1 port={pg.port} dbname={name} user={USER}"


def _argv(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _mailbox_actors(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def _check_cluster(dsn: str, tmp_path: Path, extra: tuple[str, ...], env: dict[str, str]
                   ) -> None:
    """A 2-node cluster up with ``extra`` flags and ``env``; no argv of it holds the password;
    a command reading the control data works the same way; its tenant is in the database."""
    data = tmp_path / "data"
    cluster = Cluster(data, 2, extra=extra, env=env)
    try:
        cluster.wait_running()
        pids = [cluster.proc.pid, *(n["pid"] for n in cluster.nodes())]
        assert len(pids) == 3 and all(pids)
        for pid in pids:
            assert PASSWORD not in _argv(pid), pid
        made = _mailbox_actors("tenant", "create", "acme", "--data", str(data), *extra, env=env)
        assert made.returncode == 0, made.stderr
        assert PASSWORD not in made.stdout + made.stderr
    finally:
        cluster.stop()
    with psycopg.connect(dsn, password=PASSWORD) as conn:
        assert conn.execute("SELECT count(*) FROM tenants").fetchone() == (1,)


def test_a_password_file_keeps_the_password_off_every_command_line(
        pg: PgServer, dsn: str, tmp_path: Path) -> None:
    """CL-7: ``--postgres`` names host, port, database and user; the password is in the file
    ``PGPASSFILE`` names (libpq's own format, mode 0600): the cluster and its nodes connect, a
    command reading the control data too, and no process's argv holds the password."""
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{pg.port}:*:{USER}:{PASSWORD}\n")
    passfile.chmod(0o600)
    _check_cluster(dsn, tmp_path, ("--postgres", dsn), {"PGPASSFILE": str(passfile)})


def test_a_dsn_in_the_environment_reaches_the_nodes_by_their_environment(
        dsn: str, tmp_path: Path) -> None:
    """CL-7: the whole DSN, password included, in ``MAILBOX_ACTORS_POSTGRES``: the supervisor
    hands it to its nodes through their environment, never their argv."""
    _check_cluster(dsn, tmp_path, (), {"MAILBOX_ACTORS_POSTGRES": f"{dsn} password={PASSWORD}"})


def test_a_wrong_password_stops_a_command_naming_the_setting_not_the_password(
        pg: PgServer, dsn: str, tmp_path: Path) -> None:
    """CL-7: exit 2, the setting named, the server's answer given, the password never printed
    (as a flag, a variable, or in a URI)."""
    wrong = "wrong-pw-9f2-not-shown"
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    uri = f"postgresql://{USER}:{wrong}@127.0.0.1:{pg.port}/{dbname}"
    for extra, env in (((), {"MAILBOX_ACTORS_POSTGRES": f"{dsn} password={wrong}"}),
                       (("--postgres", uri), {})):
        out = _mailbox_actors("tenant", "list", "--data", str(tmp_path), *extra, env=env)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "postgres" in out.stderr and "password authentication failed" in out.stderr
        assert wrong not in out.stdout + out.stderr
