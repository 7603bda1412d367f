"""The benchmark command (SPEC section 12): its figures, output shapes and the honesty of its limits.

Sizes are tiny and nothing here asserts a speed: the figures are measured by the command, not by
tests. What is checked is that every figure is produced, in the documented shape.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import math
from pathlib import Path

import pytest

from mailbox_actors.bench import command
from mailbox_actors.bench.figures import (
    FIGURES,
    TINY,
    Figure,
    Goal,
    Progress,
    figure,
    median,
    percentile,
)
from mailbox_actors.bench.runtime_figures import RAW_INSERT, RAW_LIMITS, RAW_PRIOR
from mailbox_actors.objects import tenant_quota

REQUIRED = {"figure", "value", "unit", "limit", "ratio", "target"}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> list[Figure]:
    import anyio

    work = tmp_path_factory.mktemp("bench")
    figures, errors = anyio.run(command.measure, Path(work), TINY, frozenset(FIGURES),
                                Progress(enabled=False))
    assert errors == []
    return figures


@pytest.mark.slow
def test_every_figure_is_measured_in_order(measured: list[Figure]) -> None:
    """A run yields each figure of SPEC section 12's first list once, in the documented order."""
    assert [f.figure for f in measured] == list(FIGURES)


@pytest.mark.slow
def test_json_lines_have_the_documented_shape(measured: list[Figure]) -> None:
    """--json prints one object per line with figure, value, unit, limit, ratio and target."""
    out = io.StringIO()
    command._write(measured, True, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(FIGURES)
    for line in lines:
        obj = json.loads(line)
        assert REQUIRED <= obj.keys()
        assert isinstance(obj["figure"], str) and obj["figure"] in FIGURES
        assert isinstance(obj["value"], int | float) and math.isfinite(obj["value"])
        assert isinstance(obj["unit"], str) and obj["unit"]
        assert isinstance(obj["target"], str) and obj["target"]
        assert obj["limit"] is None or isinstance(obj["limit"], int | float)
        if obj["limit"]:
            assert obj["ratio"] == pytest.approx(obj["value"] / obj["limit"])
        else:
            assert obj["ratio"] is None
        assert obj["pass"] in (True, False, None)


@pytest.mark.slow
def test_runtime_figures_stand_beside_a_measured_limit(measured: list[Figure]) -> None:
    """The figures with a physical limit carry the limit measured in the same run."""
    by = {f.figure: f for f in measured}
    assert by["state_changes_per_s"].limit == by["raw_sqlite_tx_per_s"].value
    assert by["cold_activation_us"].limit == by["raw_open_read_us"].value
    assert by["alarms_fired_per_s"].limit == by["raw_open_write_close_per_s"].value
    assert by["memory_per_active_actor_bytes"].limit is not None
    assert "tiny run" in (by["alarms_fired_per_s"].note or "")


@pytest.mark.slow
def test_table_has_a_verdict_per_target(measured: list[Figure]) -> None:
    """Without --json the output is an aligned table with PASS or MISS beside each target."""
    text = command.format_table(measured)
    rows = text.split("\n\n")[0].splitlines()
    assert rows[0].split() == ["figure", "value", "unit", "limit", "ratio", "target", "result"]
    for f, row in zip(measured, rows[1:], strict=True):
        assert row.startswith(f.figure)
        assert row.endswith({True: "PASS", False: "MISS", None: "-"}[f.passed])


def test_raw_statements_are_tenant_quotas_own() -> None:
    """The raw sqlite3 limit runs the statements TenantQuota.reserve and usage run, verbatim."""
    source = inspect.getsource(tenant_quota)
    for stmt in (RAW_PRIOR, RAW_LIMITS):
        assert f'"{stmt}"' in source
    assert "INSERT INTO reservations (key, reservation_id, count, minute_start, day_start, " \
           in source and '"created_ms) VALUES (?, ?, ?, ?, ?, ?)"' in source
    assert RAW_INSERT == ("INSERT INTO reservations (key, reservation_id, count, minute_start, "
                          "day_start, created_ms) VALUES (?, ?, ?, ?, ?, ?)")


def test_arguments() -> None:
    """The command takes --quick, --json and --only with figure names, and refuses others."""
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--quick", "--json", "--only", "state_changes_per_s",
                              "alarms_fired_per_s"])
    assert args.quick and args.json
    assert args.only == ["state_changes_per_s", "alarms_fired_per_s"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--only", "no_such_figure"])


def test_goals_and_ratios() -> None:
    """A ratio is value / limit; each goal states its sense in the target text."""
    f = figure("x", 6.0, "tx/s", goal=Goal("ratio_at_least", 0.5), limit=10.0)
    assert (f.ratio, f.passed, f.target) == (0.6, True, ">= 0.5 of limit")
    f = figure("x", 40.0, "us", goal=Goal("ratio_at_most", 3), limit=10.0)
    assert (f.ratio, f.passed, f.target) == (4.0, False, "<= 3x limit")
    f = figure("x", 60.0, "ms", goal=Goal("below", 50))
    assert (f.ratio, f.passed, f.target) == (None, False, "< 50 ms")
    f = figure("x", 1.0, "tx/s")
    assert f.passed is None and f.target.startswith("reference")


def test_median_and_percentile() -> None:
    """Medians of odd and even samples; p99 is the nearest-rank value."""
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5], 99) == 5
    assert math.isnan(percentile([], 99))
