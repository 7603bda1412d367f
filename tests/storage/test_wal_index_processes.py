"""Which processes empty a sleeping actor's ``-shm`` (ADR 0012, ``wal_index``): ``serve`` does,
since every connection to an actor file in its process is counted; a program that embeds a node
(``Node``, ``TestRuntime``) does not, so a connection of its own to an actor file can never have
its index truncated under it, by this process or by another that opens the file after.

Real SQLite files, a real ``serve`` process and real second processes. Nothing here switches
the emptying on in the test process: these tests see the default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

import actors_for_tests as afs
from mailbox_actors.platform.storage import wal_index
from mailbox_actors.rpc import Client
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.quota import QuotaInit, QuotaUsage
from serve_proc import serving
from sleeping_cycle import CHILD_ENV

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="open file description locks")

_FULL_INDEX = 32 * 1024  # one region of SQLite's WAL index, as a mapped index has it


def _sizes(path: Path) -> tuple[int, int]:
    """The sizes of the file's log and index."""
    return os.path.getsize(f"{path}-wal"), os.path.getsize(f"{path}-shm")


@pytest.mark.anyio
async def test_an_embedded_node_leaves_its_files_index_as_sqlite_does(tmp_path: Path) -> None:
    """RT-2, ADR 0012: a node in a program's own process (here ``TestRuntime``) closes an actor's
    file keeping its log and the index SQLite leaves, whole: the emptying is off by default."""
    assert not wal_index.emptying_on()
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        host = rt.node.host
        oid = await afs.new_scratch(rt, "embedded")
        path = host.path_for("scratch", oid)
        host.evict_all_idle()
        assert wal_index.key(path) not in wal_index._open_here  # closed
    log, index = _sizes(path)
    assert log > 0
    assert index == _FULL_INDEX


def test_serve_empties_its_actors_indexes_at_their_last_close(tmp_path: Path) -> None:
    """RT-2, RT-11, ADR 0012: ``mailbox-actors serve`` switches the emptying on: after a call
    made an actor and the node stopped (every file closed), the actor's file keeps its log and
    a 3-byte index."""
    data = tmp_path / "node"
    with serving(data):
        url = json.loads((data / "node.json").read_text())["url"]
        token = (data / "cluster.token").read_text().strip()

        async def call() -> None:
            async with Client(url, token) as c:
                qid = await c.id_from_name("tenant_quota", "acme")
                await c.call("tenant_quota", qid, QuotaInit(per_minute=2, per_day=9),
                             tenant_id="a")
                assert (await c.call("tenant_quota", qid, QuotaUsage(), tenant_id="a"))[
                    "minute_limit"] == 2

        anyio.run(call)
    files = list((data / "actors").rglob("*.sqlite"))
    assert files
    for path in files:
        log, index = _sizes(path)
        assert log > 0
        assert index == wal_index.INDEX_KEPT_BYTES


# A program that embeds the storage (the default: emptying off) and reads an actor's file with a
# connection of its own while the actor opens and closes; then another process opens the file.
_EMBEDDING = textwrap.dedent("""
    import sqlite3, subprocess, sys
    from pathlib import Path
    from mailbox_actors.platform.storage import wal_index
    from sleeping_cycle import cycle

    path = Path(sys.argv[1])
    assert not wal_index.emptying_on()
    cycle(path, 1)
    own = sqlite3.connect(path)  # not through storage: not counted
    assert own.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    for n in range(2, 6):
        cycle(path, n)
        assert own.execute("SELECT count(*) FROM t").fetchone()[0] == n
    # Another process: SQLite's first opener of an index (one that can write-lock its DMS byte,
    # which every connection that has it mapped holds shared) truncates and rebuilds it.
    print(subprocess.run([sys.executable, "-c", sys.argv[2], str(path)], check=True,
                         capture_output=True, text=True).stdout.strip())
    assert own.execute("SELECT count(*) FROM t").fetchone()[0] == 6
    print(path.with_name(path.name + "-shm").stat().st_size)
    own.close()
""")

_OTHER = textwrap.dedent("""
    import fcntl, os, sqlite3, struct, sys
    path = sys.argv[1]
    fd = os.open(path + "-shm", os.O_RDWR)
    try:  # would this process be the index's first opener? (as SQLite asks, os_unix.c)
        probe = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 128, 1, 0)
        kind = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe))[0]
    finally:
        os.close(fd)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT INTO t (v) VALUES (6)")
    print("first" if kind == fcntl.F_UNLCK else "not first", flush=True)
    os._exit(0)  # its connection left open (a close that is the file's last checkpoints it)
""")


def test_an_embedding_programs_own_connection_keeps_its_index_and_its_lock(
        tmp_path: Path) -> None:
    """RT-2, CA-10 (review s18 O19): in a program that embeds the storage, its own connection to
    an actor file (not counted) keeps its index and its lock on the index's DMS byte through the
    actor's opens and closes, so another process that opens the file after is not its index's
    first opener (which would truncate the index under that connection: SIGBUS) and its write is
    read. Run in a process of its own, so a SIGBUS fails this test rather than the suite."""
    path = tmp_path / "a.sqlite"
    done = subprocess.run([sys.executable, "-c", _EMBEDDING, str(path), _OTHER],
                          capture_output=True, text=True, timeout=60, check=False, env=CHILD_ENV)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    other, size = done.stdout.split("\n")[:2]
    assert other == "not first"
    assert int(size) == _FULL_INDEX
