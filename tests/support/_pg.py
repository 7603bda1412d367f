"""A real PostgreSQL server for the tests, started and stopped by the test itself (by pid): the
library's own local server (``platform.postgres.local_server.LocalPostgres``) on a free port.

The server binaries of the machine (``/usr/lib/postgresql/*/bin`` or ``initdb`` on PATH) run
from a temporary directory on a free port on 127.0.0.1, with their Unix socket in that
directory; under root they run as the ``postgres`` user. ``serving()`` is a test module's
server fixture: skipped, with the reason, only on a machine without the binaries.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from mailbox_actors.platform.postgres.local_server import LocalPostgres, postgres_binaries
from mailbox_actors.testing.ports import free_port

__all__ = ["PgServer", "find_binaries", "new_database", "serving", "terminate_backends"]


def find_binaries() -> tuple[Path | None, str]:
    """The directory holding initdb and postgres, or None and the reason."""
    return postgres_binaries()


# What a test's server may skip: flushing its files to the disk (fsync). Everything it writes
# still reaches the kernel before a commit is answered (synchronous_commit stays on), so a
# server or a client killed with SIGKILL, or a restart, loses nothing a test can see; only the
# machine's own crash could, which no test makes. With fsync on, a session's server spent up to
# a minute in its shutdown checkpoint on a busy disk, and every commit waited for the disk.
TEST_SETTINGS = {"fsync": "off"}


def _parent() -> Path | None:
    """Where a test server's files go: in memory (``/dev/shm``) when the machine has it. A
    session's server holds a database for every test that asked for one, a gigabyte or more; on
    a disk mounted with ``discard`` (this project's machines) removing them at the session's end
    took 20-49 s, on tmpfs under a second. Nothing a test checks depends on the disk: the
    server's fsync is off already (above). Only with room for several such servers (4 GiB free:
    a container's /dev/shm is often 64 MiB), else the system's temporary directory. A run killed
    with SIGKILL leaves its servers' files there as it would on the disk, in memory until removed
    or the machine restarts (SIGTERM and Ctrl-C stop and remove them: sigterm_teardown)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return None
    return shm if shutil.disk_usage(shm).free >= _SHM_FREE_AT_LEAST else None


_SHM_FREE_AT_LEAST = 4 << 30


class PgServer(LocalPostgres):
    """A ``LocalPostgres`` on a free port (below the ephemeral range: not taken before the
    server binds it), with ``TEST_SETTINGS``, its files in memory where it can (``_parent``)."""

    def __init__(self, bindir: Path, *, listen: Sequence[str] = ("127.0.0.1",),
                 trust_nets: Sequence[str] = ()) -> None:
        super().__init__(bindir, free_port(), listen=listen, trust_nets=trust_nets,
                         settings=TEST_SETTINGS, parent=_parent())


@contextmanager
def serving(*, listen: Sequence[str] = ("127.0.0.1",), trust_nets: Sequence[str] = ()
            ) -> Iterator[PgServer]:
    """A started server, removed on exit (a fixture: ``with serving() as pg: yield pg``)."""
    bindir, why = find_binaries()
    if bindir is None:
        pytest.skip(why)
    server = PgServer(bindir, listen=listen, trust_nets=trust_nets)
    try:
        server.start()
        yield server
    finally:
        server.remove()


_DATABASES = iter(range(1, 1 << 30))


def new_database(server: LocalPostgres, prefix: str = "t") -> str:
    """A new empty database on ``server``; its DSN."""
    return server.new_database(f"{prefix}_{os.getpid()}_{next(_DATABASES)}")


def terminate_backends(server: LocalPostgres, dsn: str) -> int:
    """``pg_terminate_backend`` every other session of ``dsn``'s database; how many."""
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(server.conninfo, autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                             "datname = %s AND pid <> pg_backend_pid()", (dbname,)).fetchall()
    return len(rows)
