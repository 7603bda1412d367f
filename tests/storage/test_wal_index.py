"""A sleeping actor's file keeps its log and an emptied index (ADR 0012, ``wal_index``): its last
connection's close truncates the ``-shm`` to 3 bytes, never while a reader of this process or
of another has it mapped, and nothing committed is lost whenever the writing process dies.

Real SQLite files, real processes: readers in another process are plain ``sqlite3`` through
``read_only`` (as an operator's inspector reads), killed or ended by pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mailbox_actors.platform.storage import wal_index
from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.opening import connect_ahead, open_storage
from mailbox_actors.platform.storage.readonly import read_only
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from sleeping_cycle import CHILD_ENV, cycle
from sleeping_cycle import dms_lock_of_this_process as _dms_lock_of_this_process
from sleeping_cycle import index_size as _index_size
from sleeping_cycle import values as _values

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="open file description locks")

_FULL_INDEX = 32 * 1024  # one region of SQLite's WAL index, as a mapped index has it


@pytest.fixture(autouse=True)
def _emptying() -> Iterator[None]:
    """These tests' process empties indexes in the closing thread, as ``serve``'s does when its
    helper process cannot take them (``serve`` switches the emptying on at its start, into the
    helper: test_wal_index_helper.py); the default, off, is test_wal_index_processes.py's."""
    wal_index.empty_indexes_at_close(elsewhere=False)
    yield
    wal_index.empty_indexes_at_close(False)


def test_a_closed_file_keeps_its_log_and_an_emptied_index(tmp_path: Path) -> None:
    """RT-2, ADR 0012: after the last connection closes, the log is still beside the file (no
    checkpoint) and its index is 3 bytes; the next open reads every write from the log."""
    path = tmp_path / "a.sqlite"
    for n in range(3):
        cycle(path, n)
        assert os.path.getsize(f"{path}-wal") > 0
        assert _index_size(path) == wal_index.INDEX_KEPT_BYTES
    assert _values(path) == [0, 1, 2]
    assert _index_size(path) == wal_index.INDEX_KEPT_BYTES  # the reader's close emptied it too
    assert wal_index.key(path) not in wal_index._open_here  # every count given back


_READER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from mailbox_actors.platform.storage.readonly import read_only

    with read_only(Path(sys.argv[1])) as conn:
        for line in sys.stdin:  # each line: read the file again, in a new read transaction
            rows = conn.execute("SELECT count(*), coalesce(sum(v), 0) FROM t").fetchone()
            print(rows[0], rows[1], flush=True)
""")


@contextlib.contextmanager
def _reader(path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", _READER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def _ask(proc: subprocess.Popen[str]) -> tuple[int, int]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("read\n")
    proc.stdin.flush()
    count, total = proc.stdout.readline().split()
    return int(count), int(total)


def test_a_reader_in_another_process_keeps_its_index_and_reads_every_commit(
        tmp_path: Path) -> None:
    """CA-10: while an inspector in another process has the file's index mapped, closing the
    actor's connection leaves the index whole, and the inspector reads each new commit; once it
    is gone, the next close empties the index."""
    path = tmp_path / "a.sqlite"
    cycle(path, 1)
    with _reader(path) as proc:
        assert _ask(proc) == (1, 1)  # it has mapped the index (and holds its DMS byte)
        for n in range(2, 12):
            cycle(path, n)
            assert _index_size(path) == _FULL_INDEX  # theirs: not truncated under them
            assert _ask(proc) == (n, n * (n + 1) // 2)
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    cycle(path, 12)
    assert _index_size(path) == wal_index.INDEX_KEPT_BYTES
    assert _values(path) == list(range(1, 13))


def test_a_reader_of_this_process_keeps_its_index_and_reads_every_commit(
        tmp_path: Path) -> None:
    """CA-10: an inspector of the node's own process holding the file is counted: the actor's
    close neither truncates the index under it nor drops its locks (no descriptor of the file is
    opened and closed meanwhile), and it reads every commit; its own close empties the index."""
    path = tmp_path / "a.sqlite"
    cycle(path, 1)
    with read_only(path) as conn:
        assert conn is not None
        for n in range(2, 6):
            cycle(path, n)
            assert _index_size(path) == _FULL_INDEX
            assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == n
            # The kernel still has its shared lock on the index's DMS byte, which tells every
            # other process's opener that the index is in use.
            assert _dms_lock_of_this_process(path) == "READ"
    assert _index_size(path) == wal_index.INDEX_KEPT_BYTES


_OPENER = textwrap.dedent("""
    import sqlite3, sys
    print("reading", flush=True)
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    print(*(v for (v,) in conn.execute("SELECT v FROM t ORDER BY k")), flush=True)
    conn.close()
""")


# nanosleep and clock_nanosleep (SQLite's back-off sleeps through usleep)
_SLEEPS = {"35", "230"} if platform.machine() == "x86_64" else {"101", "115"}


def _syscall(pid: int) -> str:
    """The system call ``pid`` is in, as /proc/PID/syscall gives its number."""
    return Path(f"/proc/{pid}/syscall").read_text().split(" ")[0].strip()


def test_an_opener_meanwhile_retries_and_then_reads_the_file_whole(tmp_path: Path) -> None:
    """The lock ``wal_index`` empties the index under (a write lock on its DMS byte) is what
    SQLite's opener checks: one that finds it held retries (SQLite's own back-off, no busy
    handler needed), and once it is released rebuilds the index from the log and reads every
    commit."""
    path = tmp_path / "a.sqlite"
    for n in range(3):
        cycle(path, n)
    fd = os.open(f"{path}-shm", os.O_RDWR)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, wal_index._WRITE_DMS)
        proc = subprocess.Popen([sys.executable, "-c", _OPENER, str(path)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline() == "reading\n"
        while _syscall(proc.pid) not in _SLEEPS:  # until it waits in SQLite's back-off
            time.sleep(0)
    finally:
        os.close(fd)  # released while the opener retries
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.split() == ["0", "1", "2"]


def test_a_file_with_another_name_keeps_its_index(tmp_path: Path) -> None:
    """SQLite keeps one index per inode, named after the first path it was opened by: a file
    with hard links (the benchmark's populations) is left as SQLite leaves it."""
    path = tmp_path / "a.sqlite"
    cycle(path, 1)
    os.link(path, tmp_path / "b.sqlite")
    cycle(path, 2)
    assert _index_size(path) == _FULL_INDEX


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from mailbox_actors.platform.storage.limits import Limits
    from mailbox_actors.platform.storage.opening import connect_ahead, open_storage
    from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
    from mailbox_actors.platform.storage.wal_index import empty_indexes_at_close

    empty_indexes_at_close()  # as serve
    path, first, durability = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    n = first
    while True:  # open, write, close, acknowledge: as an alarm on a sleeping actor, until killed
        sql = open_storage(path, create=True, durability=durability, limits=Limits(),
                           now_ms=lambda: 0)
        sql.exec("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        sql.exec("INSERT INTO t (v) VALUES (?)", n)
        RuntimeStorage(sql).close()
        print(n, flush=True)
        n += 1
""")


@pytest.mark.slow
@pytest.mark.parametrize("durability", [Durability.NORMAL, Durability.FULL])
def test_sigkill_at_any_point_of_the_cycle_loses_no_acknowledged_write(
        tmp_path: Path, durability: str) -> None:
    """RT-2, RT-11: a process opening, writing and closing one file (its index emptied at each
    close) SIGKILLed by pid, six times at varying points, leaves every acknowledged write there,
    in order, and the next process opens the file whatever its index was left as: emptied (3
    bytes), whole, part way through SQLite's own rebuild (it grows the index a 4 KB page at a
    time) or gone (a close that checkpointed a log past ``WAL_KEEP_BYTES`` deletes it; the
    writer's log passes that bound every 30 cycles or so)."""
    path = tmp_path / "a.sqlite"
    acked = -1
    sizes: set[int | None] = set()
    for round_ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(acked + 1),
                                 durability], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            for _ in range(20 + 37 * round_):  # the kill lands at another point each round
                line = proc.stdout.readline()
                assert line, "the writer stopped"
                acked = int(line)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            rest = proc.stdout.read() if proc.stdout is not None else ""
            if proc.stdout is not None:
                proc.stdout.close()
        acked = max([acked, *(int(x) for x in rest.split())])  # whole lines are acknowledged
        sizes.add(os.path.getsize(f"{path}-shm") if os.path.exists(f"{path}-shm") else None)
        values = _values(path)
        assert values[:acked + 1] == list(range(acked + 1))  # every acknowledged one, in order
        acked = len(values) - 1  # a write done but not yet acknowledged is there too
        assert values == list(range(acked + 1))
    assert sizes <= {None, wal_index.INDEX_KEPT_BYTES, *range(4096, _FULL_INDEX + 1, 4096)}


class _Time:
    """``time`` as ``wal_index`` sees it: a monotonic clock the test sets, and a sleep that says
    it was called (a connection waiting for an index to be emptied) before it sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept = threading.Event()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.set()
        time.sleep(seconds)


def test_no_connection_of_this_process_to_the_file_is_made_while_its_index_is_emptied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The count's check and the emptying are one step for the file: ``opening`` (which every
    connection of this process to an actor file passes before ``sqlite3.connect``) of that file
    waits until its index is emptied, so no thread connects between the check and the truncate;
    a connection to another file does not wait."""
    path = tmp_path / "a.sqlite"
    cycle(path, 1)
    name = wal_index.key(path)
    clock = _Time()
    monkeypatch.setattr(wal_index, "time", clock)
    registered = threading.Event()
    waited: list[bool] = []
    threads: list[threading.Thread] = []
    empty = wal_index._empty

    def register() -> None:
        wal_index.opening(name)
        registered.set()

    def watched(emptied: str, setlk: int) -> bool:
        if emptied != name:
            return empty(emptied, setlk)
        other = wal_index.key(tmp_path / "other.sqlite")
        wal_index.opening(other)  # a connection to another file: at once
        assert wal_index.closed(other)  # (no such file: nothing to empty)
        assert not clock.slept.is_set()
        opener = threading.Thread(target=register)
        opener.start()
        threads.append(opener)
        clock.slept.wait()  # the opener found the index being emptied and waits
        waited.append(not registered.is_set() and name not in wal_index._open_here)
        return empty(emptied, setlk)

    monkeypatch.setattr(wal_index, "_empty", watched)
    cycle(path, 2)
    threads[0].join()
    assert waited == [True]
    assert registered.is_set() and wal_index._open_here.get(name) == 1
    assert _index_size(path) == wal_index.INDEX_KEPT_BYTES
    monkeypatch.setattr(wal_index, "_empty", empty)
    assert wal_index.closed(name)  # the opener's count given back: the last, so emptied
    assert name not in wal_index._open_here
    os.truncate(f"{path}-shm", _FULL_INDEX)
    assert not wal_index.closed(name)  # a name not counted is never touched
    assert _index_size(path) == _FULL_INDEX


def test_an_index_mapped_past_its_writeback_is_left_for_the_next_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose index this process had mapped for ``FRESH_S`` or longer (written back by
    now: its truncate would wait for a discard) is closed as SQLite closes it; the next open
    truncates and rebuilds the index and reads every write."""
    path = tmp_path / "a.sqlite"
    clock = _Time()
    monkeypatch.setattr(wal_index, "time", clock)
    sql = open_storage(path, create=True, durability=Durability.NORMAL, limits=Limits(),
                       now_ms=lambda: 0)
    assert sql is not None
    sql.exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
    sql.exec("INSERT INTO t (v) VALUES (0)")
    clock.now = wal_index.FRESH_S
    RuntimeStorage(sql).close()
    assert _index_size(path) == _FULL_INDEX
    cycle(path, 1)  # a short one again: emptied
    assert _index_size(path) == wal_index.INDEX_KEPT_BYTES
    assert _values(path) == [0, 1]


def test_without_open_file_description_locks_the_index_stays_as_sqlite_leaves_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``F_OFD_SETLK`` is missing nothing is emptied: the file closes as before, keeping
    its log and its whole index, and reopens with every write."""
    monkeypatch.setattr(wal_index, "_OFD_SETLK", None)
    path = tmp_path / "a.sqlite"
    for n in range(3):
        cycle(path, n)
        assert _index_size(path) == _FULL_INDEX
    assert _values(path) == [0, 1, 2]
    assert wal_index.key(path) not in wal_index._open_here


def _db_lock_of_this_process(path: Path) -> str | None:
    """The POSIX lock this process holds on the database's shared range, as /proc/locks lists
    it (a WAL connection holds it shared for its life)."""
    st = os.stat(path)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if f[1] == "POSIX" and f[4] == str(os.getpid()) and f[5] == inode and \
                f[6] == str(0x40000002):
            return f[3]
    return None


def test_an_open_beside_a_reader_of_this_process_keeps_its_lock_on_the_database(
        tmp_path: Path) -> None:
    """Opening a file that another connection of this process has open does not open and close a
    descriptor of the database (the header check, ``examine``): that would drop the reader's
    shared lock on it, which tells other processes the file is in use (review s18 O1)."""
    path = tmp_path / "a.sqlite"
    cycle(path, 1)
    with read_only(path) as conn:
        assert conn is not None
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1
        assert _db_lock_of_this_process(path) == "READ"
        cycle(path, 2)
        assert _db_lock_of_this_process(path) == "READ"
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 2
    assert _values(path) == [1, 2]


def test_an_open_beside_an_uncounted_connection_of_this_process_keeps_its_lock(
        tmp_path: Path) -> None:
    """Review s19 O15: opening an actor file never opens and closes a descriptor of the database
    outside SQLite (whose close would drop every POSIX lock of the process on it): a connection
    this module does not count (an embedding program's own) keeps its shared lock through an
    alarm's open, write and close of the file, so no other process's close can take the log from
    under it."""
    path = tmp_path / "a.sqlite"
    cycle(path, 1)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1
        assert _db_lock_of_this_process(path) == "READ"
        cycle(path, 2)
        assert _db_lock_of_this_process(path) == "READ"
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 2
    finally:
        conn.close()


def test_a_connection_made_ahead_and_not_used_closes_keeping_its_log(tmp_path: Path) -> None:
    """ADR 0012, 0017: a file's connection made ahead in a worker thread and closed unused (its
    actor activated meanwhile, a node stopping) closes as an evicted actor's does: the log kept
    for the next open, no checkpoint, its count given back and its index emptied."""
    path = tmp_path / "a.sqlite"
    cycle(path, 1)
    opened = connect_ahead(path, Durability.NORMAL, Limits(), ())
    assert opened is not None
    opened.close(path)
    assert os.path.getsize(f"{path}-wal") > 0
    assert _index_size(path) == wal_index.INDEX_KEPT_BYTES
    assert wal_index.key(path) not in wal_index._open_here
    assert _values(path) == [1]


_UNCOUNTED = textwrap.dedent("""
    import sqlite3, sys
    from pathlib import Path
    from mailbox_actors.platform.storage.wal_index import empty_indexes_at_close
    from sleeping_cycle import cycle

    # As serve without its helper: its guard for a connection it does not count.
    empty_indexes_at_close(elsewhere=False)
    path = Path(sys.argv[1])
    cycle(path, 1)
    own = sqlite3.connect(path)  # not through storage: not counted
    assert own.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    for n in range(2, 6):
        cycle(path, n)
        # A truncated index under this mapping would end the process with SIGBUS here.
        assert own.execute("SELECT count(*) FROM t").fetchone()[0] == n
    print(path.with_name(path.name + "-shm").stat().st_size)
    own.close()
""")


def test_an_uncounted_connection_of_this_process_keeps_its_index(tmp_path: Path) -> None:
    """RT-2, CA-10: a program's own sqlite3 connection to an actor file (a test reading what an
    actor stored), which the storage does not count, keeps its index through any number of the
    actor's opens and closes: the first close is refused its lock and the file is never emptied
    again by this process, though that refusal's descriptor close dropped the uncounted
    connection's lock (a test run crashed with SIGBUS before). Run in a process of its own, so
    a SIGBUS fails this test rather than ending the suite."""
    path = tmp_path / "a.sqlite"
    done = subprocess.run([sys.executable, "-c", _UNCOUNTED, str(path)], capture_output=True,
                          text=True, timeout=60, check=False, env=CHILD_ENV)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert int(done.stdout) == _FULL_INDEX  # left as SQLite leaves it, never emptied under it
