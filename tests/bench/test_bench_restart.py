"""The restart figures' data directories (``bench.restart_figures``): each one, the empty one too,
holds the alarm index listing its actors, so every timed start is a restart that trusts its index,
never a first start that scans."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.bench.figures import Progress
from mailbox_actors.bench.restart_figures import _population, _template
from mailbox_actors.node.alarm_index import incomplete_marker, open_alarm_index


@pytest.mark.parametrize("n", [0, 3])
def test_every_population_holds_its_complete_index(tmp_path: Path, n: int) -> None:
    """PERF (section 12, restarts): a population of ``n`` actors, none included, comes with an
    index of ``n`` alarms and no incomplete marker, which a start opens as complete (no scan)."""
    source, at = anyio.run(_template, tmp_path / "template")
    data = tmp_path / f"n{n}"
    population = _population(data, n, source, at, Progress(enabled=False))
    assert population.count == n
    path = data / "alarms.sqlite"
    assert path.is_file()
    assert not incomplete_marker(path).exists()
    rows = AlarmIndex.read(path)
    assert len(rows) == n and set(rows.values()) <= {at}
    opened = open_alarm_index(path, durability_full=False, now_ms=lambda: 0, say=lambda _: None)
    try:
        assert opened.complete
        assert opened.index.count() == n
    finally:
        opened.index.close()
