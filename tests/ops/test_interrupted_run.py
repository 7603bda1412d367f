"""A test run stopped with SIGTERM stops the PostgreSQL server its fixture started (by pid, in
the fixture's teardown) instead of leaving it running with no parent: the same run without the
suite's hook (``sigterm_teardown``) leaves it, which this test then stops itself. So does a run
in worker processes (``make test``'s ``-n``), whose SIGTERM goes to the run's pid, not to the
worker holding the server: the run passes it on to its workers."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from _pg import find_binaries

_HOLDING = '''
import os, time
import pytest
from _pg import serving

@pytest.fixture
def pg():
    with serving() as server:
        yield server

def test_holds(pg, tmp_path):
    assert pg.proc is not None
    with open(os.environ["PG_PID_FIFO"], "w") as f:  # the test waits on the other end
        f.write(f"{pg.proc.pid} {pg.root}\\n")
    time.sleep(600)  # stopped by the test's SIGTERM long before
'''
_HOOK = "from sigterm_teardown import pytest_configure  # noqa: F401\n"
SUPPORT = Path(__file__).resolve().parents[1] / "support"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _postmaster_after_sigterm(tmp_path: Path, hook: bool, workers: int = 0) -> tuple[int, Path]:
    """Run the holding test in a pytest of its own, SIGTERM it once its server is up, wait for
    it to end: the server's pid and directory."""
    run = tmp_path / f"{'with' if hook else 'without'}-{workers}"
    run.mkdir()
    (run / "conftest.py").write_text(_HOOK if hook else "")
    (run / "test_holding.py").write_text(_HOLDING)
    fifo = run / "pg.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
           "PYTHONPATH": str(SUPPORT), "PG_PID_FIFO": str(fifo)}  # a run of its own, not a worker
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "--rootdir", str(run), "-n", str(workers), str(run / "test_holding.py")],
                            cwd=run, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    said = b""
    try:
        assert proc.stdout is not None
        while not said.endswith(b"\n"):
            ready, _, _ = select.select([reader, proc.stdout], [], [], 120)
            assert ready, "the holding test started no server within 120 s"
            if reader in ready:
                said += os.read(reader, 4096)
            elif proc.poll() is not None:
                raise AssertionError(proc.stdout.read().decode(errors="replace")[-2000:])
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        os.close(reader)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    pid, root = said.decode().split(" ", 1)
    return int(pid), Path(root)


@pytest.mark.parametrize("workers", [0, 2], ids=["one_process", "two_workers"])
def test_a_run_stopped_with_sigterm_stops_its_postgresql(tmp_path: Path, workers: int) -> None:
    if find_binaries()[0] is None:
        pytest.fail("PostgreSQL's binaries are needed (make test installs them)")
    if not workers:
        left, root = _postmaster_after_sigterm(tmp_path, hook=False)
        try:
            assert _alive(left)  # Python's own SIGTERM: no teardown, the server runs on
        finally:
            if _alive(left):
                os.kill(left, signal.SIGKILL)
            shutil.rmtree(root, ignore_errors=True)
    # In workers, the hook passes the run's SIGTERM on to each worker, which tears its fixtures
    # down as a run in one process does.
    stopped, root = _postmaster_after_sigterm(tmp_path, hook=True, workers=workers)
    if _alive(stopped):
        os.kill(stopped, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
        raise AssertionError("the run's PostgreSQL outlived its SIGTERM")
    assert not root.exists()  # removed by the fixture's teardown, as at a run's normal end
