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
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from mailbox_actors.platform.postgres.local_server import LocalPostgres, postgres_binaries
from mailbox_actors.platform.processes import pid_alive
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
#
# Its dynamic shared memory in files under its data directory (``mmap``), not in /dev/shm's
# ``PostgreSQL.<n>`` segments: a server a test kills with SIGKILL (on purpose, or with a killed
# run) leaves those behind, one MiB each, which nothing of ours can tell from another server's.
# Under its data directory they go with it.
TEST_SETTINGS = {"fsync": "off", "dynamic_shared_memory_type": "mmap"}


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
    if not _swept:
        _swept.append(sweep_leftovers(shm))
    return shm if shutil.disk_usage(shm).free >= _SHM_FREE_AT_LEAST else None


_SHM_FREE_AT_LEAST = 4 << 30
_swept: list[int] = []
_LEFT_FOR_S = 120
_OWNER = "owner.pid"  # the test process that made the server, which removes it


def sweep_leftovers(parent: Path) -> int:
    """Remove the test servers' directories (``ma-pg-*``) that runs killed with SIGKILL left in
    ``parent`` (their teardown never ran): those whose test process (``owner.pid``) is gone and
    whose server is not running. Without this, each killed run kept its servers' files in memory
    until the machine restarted, and once /dev/shm had less than 4 GiB free every later run's
    servers went to the disk. A directory made before the owner file was written (an older
    run's) goes once its server is gone and it is two minutes old. How many were removed."""
    removed = 0
    for root in parent.glob("ma-pg-*"):
        try:
            owner = int((root / _OWNER).read_text())
        except FileNotFoundError:
            owner = 0
        except (OSError, ValueError):
            continue
        try:
            server = int((root / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
        except FileNotFoundError:
            server = 0
        except (OSError, ValueError):
            continue
        if (owner and pid_alive(owner)) or (server and pid_alive(server)):
            continue
        if not owner and (not server or time.time() - root.stat().st_mtime < _LEFT_FOR_S):
            continue
        shutil.rmtree(root, ignore_errors=True)
        removed += 1
    return removed



class PgServer(LocalPostgres):
    """A ``LocalPostgres`` on a free port (below the ephemeral range: not taken before the
    server binds it), with ``TEST_SETTINGS``, its files in memory where it can (``_parent``)."""

    def __init__(self, bindir: Path, *, listen: Sequence[str] = ("127.0.0.1",),
                 trust_nets: Sequence[str] = ()) -> None:
        super().__init__(bindir, free_port(), listen=listen, trust_nets=trust_nets,
                         settings=TEST_SETTINGS, parent=_parent())
        (self.root / _OWNER).write_text(str(os.getpid()))


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
