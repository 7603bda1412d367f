"""``make run`` installs only what running needs (OPS-12): its install step is the package without
the development extra, and the node and its commands start with every development tool absent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = ("mypy", "ruff", "hypothesis", "hypothesis_jsonschema", "importlinter", "pytest",
            "prometheus_client", "trustme", "dnslib")


def test_make_run_installs_the_package_without_the_development_tools() -> None:
    """OPS-12: what ``make run`` would do on a fresh checkout (pyproject newer than any stamp)
    installs the package with the example's ``demo`` extra and the ``console`` it shows (UI-6),
    never ``.[dev]``; neither extra holds a development tool."""
    plan = subprocess.run(["make", "-n", "-W", "pyproject.toml", "run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line]
    assert installs and all(line.rstrip().endswith("-e '.[demo,console]'") for line in installs), plan
    assert "[dev]" not in plan
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    run = {d.split(">")[0].split("=")[0].strip().replace("-", "_").lower()
           for d in (*extras["demo"], *extras["console"])}
    # dnslib is the demo's loopback DNS server (also a test tool): the one shared package.
    assert not (run - {"dnslib"}) & {*DEV_ONLY, "selenium", "build", "mkdocs"}, run


def test_the_node_and_its_commands_need_no_development_tool() -> None:
    """OPS-12: with every development-only package made unimportable, the command line, the node,
    the supervisor and the objects import, and ``serve --help`` runs."""
    program = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {DEV_ONLY!r}:
            raise ImportError(f"{{name}} is a development tool")
        return None
sys.meta_path.insert(0, Refuse())
import mailbox_actors.cli.serve, mailbox_actors.cli.cluster, mailbox_actors.cli.remote
import mailbox_actors.cli.stop, mailbox_actors.node.node, mailbox_actors.objects
from mailbox_actors.cli import main
sys.exit(main(["serve", "--help"]))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--data" in done.stdout
