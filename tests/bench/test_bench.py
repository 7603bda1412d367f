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
import os
import re
import signal
from pathlib import Path

import msgspec
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
    # Lateness is reported within the capacity measured in the run, and at overload apart.
    capacity = f"{by['alarms_fired_per_s'].value:,.0f}/s alarms_fired_per_s"
    assert capacity in (by["alarm_lateness_p99_ms"].note or "")
    # ... and on the loop that capacity was measured on.
    loop = "uvloop" if "uvloop's loop" in (by["alarms_fired_per_s"].note or "") else "asyncio"
    assert f"the node on {loop}'s loop" in (by["alarm_lateness_p99_ms"].note or "")
    assert (by["alarm_lateness_overload_p99_ms"].note or "").startswith("overload")


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


def test_a_scratch_directory_that_does_not_exist_is_refused_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--dir`` naming no directory exits 2 with a line saying so, before measuring anything
    (not a traceback from deep inside)."""
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    missing = tmp_path / "nope"
    args = parser.parse_args(["--quick", "--only", "state_changes_per_s", "--dir", str(missing)])
    assert command.run(args) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert not missing.exists()


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


# ---- the HTTP and event figures (issues 3 and 4): real server processes, tiny sizes ----------


def _processes_under(path: Path) -> list[int]:
    """Pids of live processes whose command line mentions ``path`` (servers the bench started)."""
    from mailbox_actors.platform.processes import pid_alive

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(path).encode() in cmdline and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _measure(work: Path, want: tuple[str, ...]) -> tuple[list[Figure], list[str]]:
    import anyio

    return anyio.run(command.measure, work, TINY, frozenset(want), Progress(enabled=False))


def test_each_group_is_measured_in_a_fresh_process_of_its_own(tmp_path: Path) -> None:
    """PERF: a group measures the same alone (--only) or after the others: each runs in a process
    of its own (never the bench's, never an earlier group's), which its progress line names."""
    import anyio

    said = io.StringIO()
    figures, errors = anyio.run(
        command.measure, tmp_path, TINY,
        frozenset({"state_changes_per_s", "raw_sqlite_tx_per_s", "cold_activation_us"}),
        Progress(said))
    assert errors == []
    assert [f.figure for f in figures] == ["state_changes_per_s", "raw_sqlite_tx_per_s",
                                           "cold_activation_us"]
    done = re.findall(r"bench: (\w+) done in [0-9.]+ s \(process (\d+);", said.getvalue())
    assert [group for group, _ in done] == ["state", "cold"]
    pids = {int(pid) for _, pid in done}
    assert len(pids) == 2 and os.getpid() not in pids
    # Each figure says how busy the rest of the machine kept its CPUs while its group ran.
    assert all(re.search(r"other processes kept [0-9.]+ of the machine's \d+ CPUs busy",
                         f.note or "") for f in figures)


def test_the_cpus_other_processes_kept_busy_are_the_machines_busy_time_less_the_benchs() -> None:
    """A group's share of the machine: the machine's busy CPU time over the group less the bench's
    own (its process and the processes it waited for), per second of the group; never below 0
    nor above the machine's CPUs; nothing said where the machine's time is not reported."""
    from mailbox_actors.bench.cpu_share import CpuShare

    readings = {"busy": 100.0, "own": 7.0, "t": 50.0}
    share = CpuShare(busy=lambda: readings["busy"], own=lambda: readings["own"],
                     clock=lambda: readings["t"], cpus=2)
    readings.update(busy=130.0, own=17.0, t=60.0)  # 30 CPU-s busy in 10 s, 10 of them ours
    assert share.others() == 2.0
    assert share.text(2.0) == "other processes kept 2.0 of the machine's 2 CPUs busy meanwhile"
    readings.update(busy=131.0, own=40.0)  # our children's time reported late: not negative
    assert share.others() == 0.0
    readings.update(busy=200.0, own=40.0, t=70.0)  # jiffies rounding: never above the machine
    assert share.others() == 2.0
    blind = CpuShare(busy=lambda: None, own=lambda: 0.0, clock=lambda: 1.0, cpus=2)
    assert blind.others() is None and blind.text(None) is None


@pytest.mark.slow
def test_evicted_alarms_are_fired_on_a_population_no_other_phase_fired(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """PERF: alarms_fired_per_s measures the population its note describes (every alarm overdue
    at node start), as an --only run does: the overload phase, which fires most of a population,
    runs in a group of its own on a population of its own, never before the throughput phase."""
    import anyio

    said = io.StringIO()
    figures, errors = anyio.run(
        command.measure, tmp_path, TINY,
        frozenset({"alarms_fired_per_s", "alarm_lateness_overload_p99_ms"}), Progress(said))
    assert errors == []
    assert [f.figure for f in figures] == ["alarms_fired_per_s", "alarm_lateness_overload_p99_ms"]
    done = re.findall(r"bench: (\w+) done in", said.getvalue())
    assert done == ["tickers", "overload"]
    children = capfd.readouterr().err  # the groups' own progress lines, in the order they ran
    assert children.index("alarms: throughput") < children.index("alarms: lateness")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_groups_process_stops_through_its_own_cleanup_when_the_bench_is_gone(
        tmp_path: Path) -> None:
    """A group's process whose bench is gone (its stdin, the bench's pipe, at its end) is
    interrupted, so its own cleanup stops what it started, rather than killed outright."""
    import subprocess
    import sys

    import msgspec

    from mailbox_actors.bench.figures import QUICK
    from mailbox_actors.bench.group_process import Job

    job = Job(group="state", work=str(tmp_path / "state"), sizes=QUICK,
              want=["state_changes_per_s"], progress=True, started=0.0)
    with subprocess.Popen(
            [sys.executable, "-m", "mailbox_actors.bench.group_process",
             msgspec.json.encode(job).decode()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        for line in proc.stderr:  # measuring: its first round is under way
            if b"round" in line or b"interleaved" in line:
                break
        proc.stdin.close()  # as when the bench dies
        assert proc.wait(timeout=90) == -signal.SIGINT  # KeyboardInterrupt: not SIGTERM's end
        assert proc.stdout.read() == b""  # no outcome: the bench is gone
        proc.stderr.read()


def test_a_group_whose_process_ends_without_figures_is_an_error_of_that_group(
        tmp_path: Path) -> None:
    """A group's process that ends without its outcome (here: a group it does not know) is
    reported as that group's error, with how the process ended; the bench itself goes on."""
    import anyio

    from mailbox_actors.bench.group_process import run_group

    figures, errors, pid = anyio.run(run_group, "no_such_group", tmp_path, TINY,
                                     frozenset(FIGURES), Progress(enabled=False))
    assert figures == [] and pid != os.getpid()
    assert errors == ["no_such_group: its process ended without figures (exit status 1)"]


def test_every_figure_belongs_to_one_group() -> None:
    """GROUPS yields each figure of ALL_FIGURES once; --only accepts the HTTP and event figures."""
    names = [n for group, _ in command.GROUPS.values() for n in group]
    assert sorted(names) == sorted(command.ALL_FIGURES)
    assert len(set(command.ALL_FIGURES)) == len(command.ALL_FIGURES)
    assert command.ALL_FIGURES[:len(FIGURES)] == FIGURES
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--only", "http_rpc_calls_per_s", "cluster_rpc_p99_ms",
                              "events_per_s", "event_latency_p99_ms"])
    assert args.only == ["http_rpc_calls_per_s", "cluster_rpc_p99_ms", "events_per_s",
                         "event_latency_p99_ms"]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_http_figures_beside_both_echoes(tmp_path: Path) -> None:
    """RPC over HTTP to a node process and to a three-node cluster, each judged against the anyio
    echo measured in the same run, with the protocol echo printed beside it; nothing left running."""
    from mailbox_actors.bench.http_figures import HTTP_FIGURES

    try:
        figures, errors = _measure(tmp_path, HTTP_FIGURES)
        assert errors == []
        assert [f.figure for f in figures] == list(HTTP_FIGURES)
        by = {f.figure: f for f in figures}
        for f in figures:
            assert math.isfinite(f.value) and f.value > 0, f
        rpc, anyio_echo = by["http_rpc_calls_per_s"], by["tcp_echo_anyio_per_s"]
        assert rpc.limit == anyio_echo.value
        assert rpc.passed in (True, False) and "anyio echo" in rpc.target
        assert "protocol echo" in (rpc.note or "") and "FAILED" not in (rpc.note or "")
        assert by["tcp_echo_protocol_per_s"].passed is None
        assert "strict" in by["tcp_echo_protocol_per_s"].target
        assert by["http_rpc_writes_per_s"].passed is None
        assert by["http_rpc_p50_ms"].value <= by["http_rpc_p99_ms"].value
        cluster = by["cluster_rpc_calls_per_s"]
        assert cluster.limit is not None and cluster.passed in (True, False)
        assert "3-node local cluster" in (cluster.note or "")
        out = io.StringIO()
        command._write(figures, True, out)
        assert [json.loads(line)["figure"] for line in out.getvalue().splitlines()] \
            == list(HTTP_FIGURES)
    finally:
        leftover = _processes_under(tmp_path)
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)
    assert leftover == []


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_event_figures_through_a_cluster(tmp_path: Path) -> None:
    """Events from emit_event to the bench's webhook receiver through a three-node cluster, beside
    the runtime's state changes/s of the same run; every committed event arrives."""
    from mailbox_actors.bench.event_figures import EVENT_FIGURES

    try:
        figures, errors = _measure(tmp_path, EVENT_FIGURES)
        assert errors == []
        assert [f.figure for f in figures] == list(EVENT_FIGURES)
        by = {f.figure: f for f in figures}
        for f in figures:
            assert math.isfinite(f.value) and f.value > 0, f
        events = by["events_per_s"]
        assert events.limit == by["event_runtime_state_changes_per_s"].value
        assert events.passed in (True, False) and "state changes" in events.target
        assert "NOT received" not in (events.note or "") and "FAILED" not in (events.note or "")
        assert "3-node local cluster" in (events.note or "")
        p99 = by["event_latency_p99_ms"]
        assert p99.target == "< 100 ms" and p99.passed == (p99.value < 100)
        assert by["event_latency_p50_ms"].value <= p99.value
    finally:
        leftover = _processes_under(tmp_path)
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)
    assert leftover == []


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_cluster_nodes_die_with_their_supervisor_and_the_bench_finds_none_left(
        tmp_path: Path) -> None:
    """The bench's stop of a cluster whose supervisor was SIGKILLed finds no node left to kill:
    nodes die with their supervisor (OPS-1), so nothing is reported and nothing remains."""
    import anyio

    from mailbox_actors.bench.servers import start_cluster, stop_spawned
    from mailbox_actors.platform.processes import pid_alive

    async def main() -> tuple[list[int], list[str]]:
        sp = await start_cluster(tmp_path / "cluster", 2)
        try:
            os.kill(sp.pid, signal.SIGKILL)  # the supervisor dies; its nodes follow it
            await sp.proc.wait()
        finally:
            problems = await stop_spawned(sp)
        return sp.node_pids, problems

    try:
        pids, problems = anyio.run(main)
        assert problems == []
        assert not any(pid_alive(p) for p in pids)
    finally:
        leftover = _processes_under(tmp_path)
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)
    assert leftover == []


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_node_restarted_since_the_start_is_stopped_too(tmp_path: Path) -> None:
    """Stopping a cluster also stops the nodes it lists now (a node the supervisor restarted has a
    pid the bench never saw at start), by pid."""
    import subprocess
    import sys

    import anyio

    from mailbox_actors.bench.servers import start_cluster, stop_spawned
    from mailbox_actors.platform.processes import pid_alive

    restarted = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

    async def main() -> list[str]:
        sp = await start_cluster(tmp_path / "cluster", 2)
        try:
            os.kill(sp.pid, signal.SIGKILL)  # the supervisor dies, leaving its last cluster.json
            await sp.proc.wait()
            listing = tmp_path / "cluster" / "cluster.json"
            doc = json.loads(listing.read_text())
            doc["nodes"][0]["pid"] = restarted.pid  # as if node-0 had been restarted
            listing.write_text(json.dumps(doc))
        finally:
            # The sleeper never stops by itself: it is found outliving the grace, whatever its
            # length (20 s by default; 2 s here, not to wait 20 s for nothing).
            problems = await stop_spawned(sp, grace_s=2.0)
        return problems

    try:
        problems = anyio.run(main)
        assert restarted.wait(timeout=30) == -signal.SIGKILL
        assert any(f"pid {restarted.pid} outlived" in p for p in problems)
        assert not pid_alive(restarted.pid)
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.wait()
        leftover = _processes_under(tmp_path)
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)
    assert leftover == []


def _bench_event(eid: str, n: int) -> bytes:
    from mailbox_actors.bench.webhook_receiver import EVENT_TYPE

    return json.dumps({"id": eid, "type": EVENT_TYPE, "sequence": n, "tenant_id": "t_1",
                       "identity_id": "idn_1", "occurred_at_ms": 1, "data": {"n": n}}).encode()


def test_webhook_receiver_dedupes_and_checks_signatures() -> None:
    """The bench's receiver notes each event id once, counts duplicates and bad signatures, and
    answers 200 at once (400 to a body that is not an event); GET /seen/K answers the arrivals
    from the K-th on."""
    import time

    import anyio

    from mailbox_actors.bench.webhook_receiver import SECRET, Seen, WebhookReceiver
    from mailbox_actors.webhooks.delivery import SIGNATURE_HEADER, sign

    async def main() -> WebhookReceiver:
        rx = WebhookReceiver(SECRET)
        now = int(time.time())
        for eid, n, secret in (("evt_a", 1, SECRET), ("evt_a", 1, SECRET), ("evt_b", 2, "y" * 32)):
            b = _bench_event(eid, n)
            status, _, _ = await rx("POST", "/hook", {SIGNATURE_HEADER: sign(secret, now, b)}, b)
            assert status == 200
        assert (await rx("POST", "/hook", {}, b"nope"))[0] == 400
        status, body, _ = await rx("GET", "/seen/1", {}, b"")
        assert status == 200
        seen = msgspec.json.decode(body, type=Seen)
        assert [n for n, _ in seen.arrivals] == [2] and seen.arrivals[0][1] == rx.by_n[2]
        assert (seen.duplicates, seen.bad_signatures, seen.malformed) == (1, 1, 1)
        return rx

    rx = anyio.run(main)
    assert (rx.duplicates, rx.bad_signatures, rx.malformed) == (1, 1, 1)
    assert sorted(rx.by_n) == [1, 2] and sorted(rx.first_seen) == ["evt_a", "evt_b"]


def test_webhook_receiver_process_times_arrivals_on_the_bench_clock() -> None:
    """The event figures' receiver runs in a process of its own (a user's endpoint is): the bench
    reads its arrivals, each timed on the clock the bench times commits with (between the POST's
    start and its answer in this process), and its counts; stop() ends the process."""
    import time

    import anyio

    from mailbox_actors.bench.webhook_receiver import SECRET, ReceiverProcess
    from mailbox_actors.http.client import HttpPool
    from mailbox_actors.platform.processes import pid_alive
    from mailbox_actors.webhooks.delivery import SIGNATURE_HEADER, sign

    async def main() -> None:
        rx = await ReceiverProcess.start()
        try:
            assert rx.pid != os.getpid()
            assert not await rx.wait_for([1], 0.05)
            spans: dict[int, tuple[float, float]] = {}
            async with HttpPool() as pool:
                for eid, n, secret in (("evt_a", 1, SECRET), ("evt_a", 1, SECRET),
                                       ("evt_b", 2, "y" * 32), ("evt_c", 3, SECRET)):
                    b = _bench_event(eid, n)
                    headers = {SIGNATURE_HEADER: sign(secret, int(time.time()), b)}
                    t0 = time.perf_counter()
                    status, _ = await pool.request(rx.base_url, "POST", "/hook", headers, b,
                                                   timeout_s=10)
                    spans.setdefault(n, (t0, time.perf_counter()))
                    assert status == 200
                assert (await pool.request(rx.base_url, "POST", "/hook", {}, b"nope",
                                           timeout_s=10))[0] == 400
            assert await rx.wait_for([1, 2, 3], 10)
            assert sorted(rx.by_n) == [1, 2, 3]
            for n, (t0, t1) in spans.items():
                assert t0 <= rx.by_n[n] <= t1
            assert await rx.wait_types("identity.bench", 3, 10)
            assert (rx.duplicates, rx.bad_signatures, rx.malformed) == (1, 1, 1)
        finally:
            await rx.stop()
        assert rx._proc.returncode is not None and not pid_alive(rx.pid)

    anyio.run(main)
