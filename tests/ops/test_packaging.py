"""Packaged as its users install it (UI-8): ``python -m build`` makes a wheel and an sdist; the
wheel, installed into a fresh virtual environment, runs ``mailbox-actors --version`` and a node
that answers a call, and carries the console's templates and static files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from child_output import Lines, _port

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(*args: str, cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


@pytest.mark.slow
def test_the_wheel_installs_in_a_fresh_venv_and_serves(tmp_path: Path) -> None:
    """UI-8: build makes both; the wheel holds the package, py.typed, the console's assets and
    the entry points, the sdist the sources and tests but no caches; installed alone in a new
    venv, ``--version`` prints the project's version and a node it starts answers ``call``."""
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT), cwd=tmp_path)
    wheel = dist / f"mailbox_actors-{VERSION}-py3-none-any.whl"
    sdist = dist / f"mailbox_actors-{VERSION}.tar.gz"
    assert wheel.exists() and sdist.exists(), sorted(p.name for p in dist.iterdir())
    names = set(zipfile.ZipFile(wheel).namelist())
    console = ROOT / "src" / "mailbox_actors" / "console"
    assets = {f"mailbox_actors/console/{p.relative_to(console)}" for p in console.rglob("*")
              if p.is_file() and p.suffix in (".html", ".css", ".js")}
    assert assets and assets <= names, assets - names
    assert {"mailbox_actors/py.typed", "mailbox_actors/cli/__init__.py"} <= names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    points = zipfile.ZipFile(wheel).read(entry).decode()
    assert "mailbox-actors = mailbox_actors.cli:main" in points and "pytest11" in points
    members = tarfile.open(sdist).getnames()
    top = f"mailbox_actors-{VERSION}"
    assert {f"{top}/pyproject.toml", f"{top}/src/mailbox_actors/__init__.py",
            f"{top}/README.md"} <= set(members)
    assert any(m.startswith(f"{top}/tests/") for m in members)
    assert not any("_cache" in m or "/.venv/" in m for m in members), [
        m for m in members if "_cache" in m][:5]

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    cli = str(venv / "bin" / "mailbox-actors")
    _run(str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel),
         cwd=tmp_path)
    assert _run(cli, "--version", cwd=tmp_path).strip() == f"mailbox-actors {VERSION}"
    where = _run(str(venv / "bin" / "python"), "-c",
                 "import mailbox_actors, os; print(os.path.dirname(mailbox_actors.__file__))",
                 cwd=tmp_path).strip()
    assert where.startswith(str(venv)), where  # the installed copy, not this checkout

    data = tmp_path / "node"
    node = subprocess.Popen([cli, "serve", "--data", str(data), "--port", str(_port()),
                             "--log-level", "warning"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        Lines(node).until("operator token in")
        out = json.loads(_run(cli, "call", "tenant_quota", "acme",
                              '{"op":"init","per_minute":5,"per_day":10}', "--tenant", "t1",
                              "--data", str(data), cwd=tmp_path))
        assert "ok" in out, out
        status = json.loads(_run(cli, "status", "--data", str(data), "--json", cwd=tmp_path))
        assert [n["status"] for n in status["nodes"]] == ["ok"]
        node.send_signal(signal.SIGTERM)
        assert node.wait(timeout=60) == 0
    finally:
        if node.poll() is None:
            os.kill(node.pid, signal.SIGKILL)
            node.wait()
        if node.stdout is not None:
            node.stdout.close()
