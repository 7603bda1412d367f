"""The README's "Writing an actor" example runs as written and prints what it says it prints, and
the test beside it passes under the pytest plugin the package installs (TK-1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Writing an actor"):]
    section = section[:section.index("\n## ", 1)]
    out = []
    for part in section.split("```python\n")[1:]:
        out.append(part[:part.index("\n```")])
    return out


def test_the_writing_an_actor_example_runs(tmp_path: Path) -> None:
    code = _blocks()[0]
    script = tmp_path / "counter.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "{'n': 12}" in proc.stdout


def test_the_examples_own_test_passes_under_the_plugin(tmp_path: Path) -> None:
    actor, test = _blocks()[:2]
    (tmp_path / "counter.py").write_text(actor)
    (tmp_path / "test_counter.py").write_text(test)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_counter.py"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-500:]
    # One run per anyio backend installed (asyncio, and trio where a library brought it).
    assert " passed" in proc.stdout and "failed" not in proc.stdout
