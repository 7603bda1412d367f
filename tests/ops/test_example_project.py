"""The example project (examples/counter_project) tests its own actor with the plugin's fixtures
only, as a project built on mailbox-actors would (TK-1..TK-4)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "counter_project"


def test_the_example_project_passes_its_own_tests_with_the_plugins_fixtures() -> None:
    """TK-1: pytest run in the example project (its own configuration, no conftest.py) finds the
    plugin's fixtures through the installed entry point, and every test of it passes."""
    assert not (EXAMPLE / "conftest.py").exists() and not (EXAMPLE / "tests" / "conftest.py").exists()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=EXAMPLE,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout
    assert "node_started" not in proc.stdout  # TK-4: quiet


def test_the_example_project_imports_only_public_names() -> None:
    """TK-3: the example imports mailbox_actors' public names only (the package's __all__ and
    the mailbox_actors.testing module), never a private module."""
    import mailbox_actors

    for path in EXAMPLE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mailbox_actors"):
                assert node.module in ("mailbox_actors", "mailbox_actors.testing"), path
                if node.module == "mailbox_actors":
                    assert {a.name for a in node.names} <= set(mailbox_actors.__all__), path
