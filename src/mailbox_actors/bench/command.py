"""``mailbox-actors bench``: the performance figures of SPEC section 12, each beside its limit.

Runs the figure groups one after another, each in a fresh process of its own (``group_process``), in
a scratch directory, and prints one line per figure (a table, or JSON lines with ``--json``);
progress goes to stderr. A missed target is a result, not a failure: the exit
status is 1 only when a measurement could not be made.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TextIO

import anyio
import msgspec

from mailbox_actors.bench.burst_figures import BURST_FIGURES, burst_figures
from mailbox_actors.bench.carrier_figures import CARRIER_FIGURES, carrier_figures
from mailbox_actors.bench.cpu_share import CpuShare
from mailbox_actors.bench.dns_figures import DNS_FIGURES, dns_figures
from mailbox_actors.bench.event_figures import EVENT_FIGURES, event_figures
from mailbox_actors.bench.figures import FIGURES, FULL, QUICK, Figure, Progress, Sizes
from mailbox_actors.bench.group_process import run_group
from mailbox_actors.bench.http_figures import HTTP_FIGURES, http_figures
from mailbox_actors.bench.inbound_figures import INBOUND_FIGURES, inbound_figures
from mailbox_actors.bench.inspect_figures import INSPECT_FIGURES, inspect_figures
from mailbox_actors.bench.machines_figures import MACHINES_FIGURES, machines_figures
from mailbox_actors.bench.post_figures import POST_FIGURES, post_figures
from mailbox_actors.bench.postgres_figures import POSTGRES_FIGURES, postgres_figures
from mailbox_actors.bench.request_stream import LOOP_ENV
from mailbox_actors.bench.restart_figures import RESTART_FIGURES, restart_figures
from mailbox_actors.bench.runtime_figures import cold_activation, state_changes
from mailbox_actors.bench.search_figures import SEARCH_FIGURES, search_figures
from mailbox_actors.bench.smtp_figures import SMTP_FIGURES, smtp_figures
from mailbox_actors.bench.start_figures import START_FIGURES, start_figures
from mailbox_actors.bench.ticker_figures import TICKER_FIGURES, tickers
from mailbox_actors.platform.logging import configure_logging

__all__ = ["ALL_FIGURES", "GROUPS", "add_arguments", "format_table", "measure", "run"]

# (scratch dir, sizes, progress, wanted figures, errors to add to) -> figures
Measure = Callable[[Path, Sizes, Progress, frozenset[str], list[str]], Awaitable[list[Figure]]]


async def _state(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                 _errors: list[str]) -> list[Figure]:
    return await state_changes(work, sizes, progress)


async def _cold(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                _errors: list[str]) -> list[Figure]:
    return await cold_activation(work, sizes, progress)


async def _start(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                 _errors: list[str]) -> list[Figure]:
    return await start_figures(work, sizes, progress)


async def _burst(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                 _errors: list[str]) -> list[Figure]:
    return await burst_figures(work, sizes, progress)


async def _restart(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                   _errors: list[str]) -> list[Figure]:
    return await restart_figures(work, sizes, progress)


# The overload phase fires most of the population's alarms: the phases after it in the same group
# (the throughput that alarms_fired_per_s is) would measure files already fired, not the population
# their notes describe and an --only run measures. So it is a group of its own, on its own
# population, in its own process.
_OVERLOAD = "alarm_lateness_overload_p99_ms"


async def _tickers(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                   errors: list[str]) -> list[Figure]:
    return await tickers(work, sizes, progress, want - {_OVERLOAD}, errors)


async def _overload(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                    errors: list[str]) -> list[Figure]:
    return await tickers(work, sizes, progress, want & {_OVERLOAD}, errors)


# group -> (the figures it yields, how to measure them)
GROUPS: dict[str, tuple[tuple[str, ...], Measure]] = {
    "state": (("state_changes_per_s", "raw_sqlite_tx_per_s"), _state),
    "cold": (("cold_activation_us", "raw_open_read_us"), _cold),
    "start": (START_FIGURES, _start),  # fresh processes (issue 15)
    "tickers": (tuple(n for n in TICKER_FIGURES if n != _OVERLOAD), _tickers),
    "overload": ((_OVERLOAD,), _overload),  # the same population made again, fired past capacity
    "burst": (BURST_FIGURES, _burst),  # alarms due at one instant on open actors (issue 28)
    "restart": (RESTART_FIGURES, _restart),  # serve restarted on 0-100,000 actors (issue 28)
    "http": (HTTP_FIGURES, http_figures),  # servers in child processes (issue 3)
    "events": (EVENT_FIGURES, event_figures),  # a local cluster and a webhook receiver (issue 4)
    # the shared state on PostgreSQL beside the SQLite files, one server of its own (issue 23)
    "postgres": (POSTGRES_FIGURES, postgres_figures),
    # three machine processes on one PostgreSQL beside a local cluster; the epoch check (issue 24)
    "machines": (MACHINES_FIGURES, machines_figures),
    "smtp": (SMTP_FIGURES, smtp_figures),  # an aiosmtpd sink in a child process (issue 11)
    "post": (POST_FIGURES, post_figures),  # two actors on one node (issue 14)
    "dns": (DNS_FIGURES, dns_figures),  # a loopback DNS server in a child process (issue 13)
    "inbound": (INBOUND_FIGURES, inbound_figures),  # the SMTP door beside a no-op aiosmtpd (issue 12)
    "carrier": (CARRIER_FIGURES, carrier_figures),  # submit and dispatch to a sink (issue 11)
    "search": (SEARCH_FIGURES, search_figures),  # search_messages over 10,000 messages (issue 26)
    # the console's reads: 100,000 actors on disk, 10,000 messages in a mailbox (issue 25)
    "inspect": (INSPECT_FIGURES, inspect_figures),
}

# Every figure the command prints, in the order it prints them: the in-process figures of
# ``FIGURES``, then those measured against server processes the bench starts.
ALL_FIGURES: tuple[str, ...] = (FIGURES + HTTP_FIGURES + EVENT_FIGURES + POSTGRES_FIGURES
                                 + MACHINES_FIGURES
                                 + SMTP_FIGURES + POST_FIGURES + DNS_FIGURES + CARRIER_FIGURES
                                 + INBOUND_FIGURES + SEARCH_FIGURES + INSPECT_FIGURES)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes (20,000 actors holding alarms; the restart and "
                             "inspection figures keep their 100,000 actors on disk): 13 minutes "
                             "at load 7 on two cores, 22 at load 12, most of it the alarm, event "
                             "and PostgreSQL groups (each group says its time as it ends)")
    parser.add_argument("--json", action="store_true",
                        help='one JSON object per line: {"figure", "value", "unit", "limit", '
                             '"ratio", "target", "pass", "note"}')
    parser.add_argument("--only", nargs="+", metavar="FIGURE", choices=ALL_FIGURES,
                        help="measure only these figures (their groups run as in a whole run, "
                             "each in a fresh process of its own; choices: %(choices)s)")
    parser.add_argument("--stream-loop", choices=("served", "asyncio"), default="served",
                        help="the loop of the alarm burst with a request stream "
                             "(request_p99_during_alarm_burst_ms, request_p99_idle_ms and "
                             "alarms_fired_per_s) and of the lateness paced at 0.7 of that "
                             "capacity (alarm_lateness_p99_ms): the one serve runs a node on "
                             "(uvloop where "
                             "importable; the default), or asyncio's own, as records before "
                             "session 15 measured them")
    parser.add_argument("--dir", metavar="DIR",
                        help="make the scratch directory under DIR (default: the system's "
                             "temporary directory); it is removed afterwards")


async def measure(work: Path, sizes: Sizes, want: frozenset[str], progress: Progress,
                  ) -> tuple[list[Figure], list[str]]:
    """Every wanted figure, in ``ALL_FIGURES`` order, and the errors of groups that failed. Each
    group is measured in a fresh process of its own, one after another."""
    got: dict[str, Figure] = {}
    errors: list[str] = []
    for group, (names, _measure) in GROUPS.items():
        if not want & set(names):
            continue
        started = time.perf_counter()
        share = CpuShare()
        # In a fresh process (group_process): what an earlier group left in this one (its heap,
        # the collector's state, threads, descriptors) is no part of what this group measures.
        found, failed, pid = await run_group(group, work / group, sizes, want, progress)
        # What else ran on the machine meanwhile goes with each figure (cpu_share).
        busy = share.text(share.others())
        for f in found:
            if busy is not None:
                f.note = busy if f.note is None else f"{f.note}; {busy}"
            got[f.figure] = f
        errors += failed
        # Its files go now, between groups (never while one measures), so the run's disk use
        # is one group's at a time.
        await anyio.to_thread.run_sync(shutil.rmtree, work / group, True)
        progress.say(f"bench: {group} done in {time.perf_counter() - started:.1f} s "
                     f"(process {pid}{'' if busy is None else '; ' + busy})")
    return [got[name] for name in ALL_FIGURES if name in want and name in got], errors


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def format_table(figures: Sequence[Figure]) -> str:
    """Aligned columns, then the notes."""
    head = ("figure", "value", "unit", "limit", "ratio", "target", "result")
    rows = [head] + [(f.figure, _num(f.value), f.unit, _num(f.limit),
                      "-" if f.ratio is None else f"{f.ratio:.2f}", f.target,
                      {True: "PASS", False: "MISS", None: "-"}[f.passed]) for f in figures]
    width = [max(len(r[i]) for r in rows) for i in range(len(head))]
    right = {1, 3, 4}
    lines = ["  ".join(c.rjust(width[i]) if i in right else c.ljust(width[i])
                       for i, c in enumerate(r)).rstrip() for r in rows]
    notes = [f"  {f.figure}: {f.note}" for f in figures if f.note]
    return "\n".join(lines + (["", "notes:", *notes] if notes else [])) + "\n"


def _write(figures: Sequence[Figure], as_json: bool, out: TextIO) -> None:
    if as_json:
        for f in figures:
            out.write(msgspec.json.encode(f).decode() + "\n")
    else:
        out.write(format_table(figures))
    out.flush()


def run(args: argparse.Namespace) -> int:
    # Warnings only (the runtime's info lines would drown the progress), as readable lines among
    # the progress lines, wherever stderr goes (a terminal or a file): never JSON.
    configure_logging(json=False, level="warning")
    if args.dir is not None and not Path(args.dir).is_dir():
        print(f"mailbox-actors bench: --dir {args.dir!r} is not a directory (make it first)",
              file=sys.stderr)
        return 2
    sizes = QUICK if args.quick else FULL
    # Read in the group's process (ticker_figures), set either way: a variable left in the shell
    # does not choose for the flag.
    os.environ[LOOP_ENV] = args.stream_loop
    want = frozenset(args.only or ALL_FIGURES)
    progress = Progress()
    progress.say(f"bench: {sizes.name} run of {len(want)} figure(s)")
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="mailbox-actors-bench-", dir=args.dir))
    try:
        figures, errors = anyio.run(measure, work, sizes, want, progress)
    finally:
        progress.say(f"bench: removing the scratch directory {work}")
        shutil.rmtree(work, ignore_errors=True)
    progress.say(f"bench: done in {time.perf_counter() - started:.1f} s")
    _write(figures, args.json, sys.stdout)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errors else 0
