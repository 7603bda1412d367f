"""The README's "Writing an actor" example runs as written and prints what it says it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_writing_an_actor_example_runs(tmp_path: Path) -> None:
    text = README.read_text()
    section = text[text.index("## Writing an actor"):]
    start = section.index("```python\n") + len("```python\n")
    code = section[start:section.index("\n```", start)]
    script = tmp_path / "counter.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "{'n': 12}" in proc.stdout
