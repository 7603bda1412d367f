"""The environment the start figure measures a node in (bench/start_install.py): what an installation
of the package holds, so the figure neither pays for nor hides the development tools."""

from __future__ import annotations

import subprocess
from pathlib import Path

from mailbox_actors.bench.start_install import installed_python, runtime_distributions

_PROBE = """
import importlib.util, sys, sysconfig, os
site = sysconfig.get_paths()["purelib"]
print(sorted(n for n in os.listdir(site) if n.endswith(".pth")))
for name in ("mailbox_actors", "anyio", "msgspec", "structlog", "aiosmtplib", "rich", "pytest",
             "mypy", "hypothesis"):
    print(name, importlib.util.find_spec(name) is not None)
"""


def test_the_start_environment_holds_the_package_and_its_runtime_needs_only(tmp_path: Path) -> None:
    """PERF (section 12: a figure beside its limit measured the same way) and OPS-12 (running
    needs only the runtime dependencies): the start figure's environment imports the package and
    every runtime dependency, runs no ``.pth`` file at interpreter start, and has none of the
    development tools (rich, pulled by import-linter, would cost every node start 60 ms)."""
    python = installed_python(tmp_path / "env")
    assert installed_python(tmp_path / "env") == python  # made once, then reused
    out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, check=True,
                         timeout=60).stdout.splitlines()
    assert out[0] == "[]"
    found = dict(line.split() for line in out[1:])
    assert found == {"mailbox_actors": "True", "anyio": "True", "msgspec": "True",
                     "structlog": "True", "aiosmtplib": "True", "rich": "False",
                     "pytest": "False", "mypy": "False", "hypothesis": "False"}


def test_runtime_distributions_follow_requirements_without_extras() -> None:
    """OPS-12: the runtime closure is the package's requirements without an extra, followed
    through their own (attrs comes through aiosmtpd), never a development extra's."""
    names = {d.metadata["Name"].lower() for d in runtime_distributions()}
    assert {"mailbox-actors", "anyio", "msgspec", "structlog", "aiosmtpd", "attrs"} <= names
    assert not names & {"pytest", "mypy", "ruff", "import-linter", "rich", "hypothesis"}
