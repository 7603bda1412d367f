"""The peer comparison (issue 28): mailbox-actors beside workerd and Miniflare, same workload.

    .venv/bin/python bench/peers/peers.py [--rounds 3] [--n 1000]      (or: make peers)

Installs pinned ``workerd`` and ``miniflare`` with npm into a cache directory outside the
repository (``$MAILBOX_ACTORS_PEERS_CACHE``, else ``~/.cache/mailbox-actors-peers``), then runs, in
each round and in an order that rotates from round to round (so the machine's load falls on every
side alike):

- each peer (``workerd serve workerd.capnp``; ``node miniflare_serve.mjs``, Miniflare running its
  own pinned workerd) on a fresh storage directory: start to first answer, from spawn to the first
  successful HTTP answer of an object call (``GET /read``, polled every 2 ms; it opens a
  SQLite-backed Durable Object), then a burst: N ``Ticker`` objects (ticker.js) touched once each
  by ``GET /init``, which also sets each one's alarm to one instant T; every alarm handler is one
  SQLite write. Fired/s is N over (the last handler's start - T), lateness is each handler's start
  - T (``Date.now()`` in the handler, read back after the burst);
- each peer again, on cold objects (``--cold N``, 3,000 by default; 0 leaves it out): N tickers
  made with their alarm at one instant T, the peer stopped before T, and started again on the same
  storage after it, so every alarm is overdue at start on an object that is not in memory (ours'
  ``alarms_fired_per_s``: evicted actors, all overdue at node start). Fired/s is N over (the last
  handler's start - the restarted peer's spawn): both peers fire the overdue alarms before they
  answer a first request, after a phase that grows with N, so the whole way from the spawn is
  what a restart costs them (ours' figure counts from the node's start, its process start
  aside). ``cold_first_alarm_ms`` is the first handler's start after the spawn. The handlers'
  times are read back once the peer's processes have used no CPU for a second;
- ours: ``mailbox-actors bench --quick --json --only`` the burst figures (the same N, 1,000, in
  its quick sizes), the evicted actors' alarm figures (20,000 actors, at most 1,000 open) and the
  start figures, as the benchmark measures them; and start to first answer as the peers'
  (``serve`` on a fresh data directory, spawn to an object call answered: ``/healthz`` polled
  every 2 ms, then a TenantQuota's ``init`` through the HTTP API).

``--starts-only`` measures the starts alone (a minute, no bursts and no bench run).

Prints one table of medians over the rounds (figure, ours, workerd, Miniflare, ours/workerd) and
writes every measurement and the table as JSON lines (``--out``, default under the cache).
Exit status: 0 measured, 1 a side failed, 2 cannot run (no npm or node, bad arguments).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# The benchmark's own nearest-rank percentile and median: both sides' figures are read alike.
from mailbox_actors.bench.figures import median, percentile
from mailbox_actors.testing.ports import free_port  # below the ephemeral range: no race

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORKERD_VERSION = "1.20261123.1"
MINIFLARE_VERSION = "4.20260730.0"  # runs its own workerd, 1.20260730.1 (its exact dependency)
PEERS = ("workerd", "miniflare")
OURS_FIGURES = ("alarm_burst_per_s", "alarm_burst_lateness_p99_ms", "raw_burst_tx_per_s",
                "alarms_fired_per_s", "raw_open_write_close_per_s",
                "serve_start_to_first_answer_ms", "runtime_libraries_start_ms")
# (figure in the table, unit, what the peers report it as); the peers' names are ours.
TABLE = (("alarm_burst_per_s", "alarms/s"), ("alarm_burst_per_raw", "ratio"),
         ("alarm_burst_lateness_p99_ms", "ms"),
         ("cold_alarms_per_s", "alarms/s"), ("cold_alarms_per_raw", "ratio"),
         ("cold_first_alarm_ms", "ms"),
         ("start_to_first_answer_ms", "ms"), ("serve_start_to_first_answer_ms", "ms"),
         ("raw_burst_tx_per_s", "tx/s"), ("raw_open_write_close_per_s", "tx/s"),
         ("runtime_libraries_start_ms", "ms"))
_POLL_S = 0.002


class CannotRun(Exception):
    """The harness cannot run here (exit status 2); the message says what to do."""


# Every child the harness runs is the leader of a session of its own (Miniflare's workerd and
# ours' bench children are in it): by its pid, while it lives. A SIGINT or SIGTERM of the driver
# ends them all and removes the run's files (_end).
_LIVE: set[int] = set()
_WORK: list[Path] = []


def _session(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, start_new_session=True, **kw)
    _LIVE.add(proc.pid)
    return proc


def _end(signum: int, _frame: object) -> None:
    for pid in list(_LIVE):
        try:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    for work in _WORK:
        shutil.rmtree(work, ignore_errors=True)
    print(f"peers: stopped by signal {signum}; its children ended", file=sys.stderr)
    os._exit(128 + signum)


# ---- installing the peers ----------------------------------------------------------------------

def cache_dir() -> Path:
    root = os.environ.get("MAILBOX_ACTORS_PEERS_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "mailbox-actors-peers"


def install(cache: Path) -> Path:
    """``node_modules`` of the pinned peers under ``cache`` (npm runs only when they are missing)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise CannotRun(f"{tool} is not on PATH: the peers are npm packages (workerd "
                            f"{WORKERD_VERSION}, miniflare {MINIFLARE_VERSION}); install Node.js "
                            "20 or later with npm, or put it on PATH")
    where = cache / f"workerd-{WORKERD_VERSION}_miniflare-{MINIFLARE_VERSION}"
    modules = where / "node_modules"
    if (modules / ".bin" / "workerd").exists() and (modules / "miniflare").is_dir():
        return modules
    where.mkdir(parents=True, exist_ok=True)
    (where / "package.json").write_text(json.dumps({
        "private": True, "dependencies": {"workerd": WORKERD_VERSION,
                                          "miniflare": MINIFLARE_VERSION}}, indent=2) + "\n")
    print(f"peers: npm install workerd@{WORKERD_VERSION} miniflare@{MINIFLARE_VERSION} "
          f"into {where}", file=sys.stderr)
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--save-exact"],
                          cwd=where, capture_output=True, text=True)
    if done.returncode != 0 or not (modules / ".bin" / "workerd").exists():
        raise CannotRun(f"npm install in {where} failed ({done.returncode}): "
                        f"{done.stderr[-1500:]}")
    return modules


# ---- one peer process --------------------------------------------------------------------------

def spawn(peer: str, modules: Path, port: int, storage: Path) -> subprocess.Popen[bytes]:
    storage.mkdir(parents=True, exist_ok=True)
    if peer == "workerd":
        argv = [str(modules / ".bin" / "workerd"), "serve", str(HERE / "workerd.capnp"),
                "--socket-addr", f"http=127.0.0.1:{port}",
                "--directory-path", f"do-storage={storage}"]
    else:
        argv = ["node", str(HERE / "miniflare_serve.mjs"), str(port), str(storage)]
    env = {**os.environ, "NODE_PATH": str(modules)}
    # Its own session: Miniflare's workerd child is stopped with it, by the group's id.
    return _session(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of its group is left (Miniflare's workerd)
    except ProcessLookupError:
        pass
    _LIVE.discard(proc.pid)
    if proc.stderr is not None:
        proc.stderr.close()


def get(port: int, path: str, timeout: float = 60) -> Any:
    """The JSON of ``GET path``, which must answer 200."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        body = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"GET {path} answered {reply.status}: {body[:300]!r}")
        return json.loads(body)
    finally:
        conn.close()


def first_answer_ms(proc: subprocess.Popen[bytes], spawned: float, port: int) -> float:
    """Milliseconds from ``spawned`` to the first successful answer of an object call."""
    while True:
        try:
            get(port, "/read?i=start", timeout=30)
            return (time.perf_counter() - spawned) * 1000
        except (OSError, RuntimeError, http.client.HTTPException):
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"the peer exited ({proc.returncode}) before it answered: "
                                   f"{err[-1500:]}") from None
            if time.perf_counter() - spawned > 60:
                raise RuntimeError("the peer did not answer within 60 s") from None
            time.sleep(_POLL_S)


def made_with_alarm(port: int, n: int, lead_ms: int) -> int:
    """N tickers made, then touched once each with their alarm at one instant, ahead by
    ``lead_ms`` and 1.5x the time the making took (the touches are writes too); the instant."""
    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # the population, as ours makes it
        list(pool.map(lambda i: get(port, f"/init?i={i}&at=0"), range(n)))
    lead_ms += int((time.perf_counter() - t) * 1500)
    at = time.time_ns() // 1_000_000 + lead_ms
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # the burst's touch, once each
        list(pool.map(lambda i: get(port, f"/init?i={i}&at={at}"), range(n)))
    if time.time_ns() // 1_000_000 > at - 100:
        raise RuntimeError(f"touching {n:,} objects took longer than the lead ({lead_ms} ms): "
                           "give a larger --lead-ms")
    return at


def burst(port: int, n: int, lead_ms: int) -> tuple[float, list[int]]:
    """N tickers touched once each with their alarm at one instant; (fired/s, lateness ms)."""
    at = made_with_alarm(port, n, lead_ms)
    time.sleep((at - time.time_ns() // 1_000_000) / 1000 + 0.5)
    last: dict[int, int] = {}
    deadline = time.perf_counter() + 120
    while len(last) < n:  # read back after the burst: the reads do not compete with it
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            todo = [i for i in range(n) if i not in last]
            rows = pool.map(lambda i: get(port, f"/read?i={i}"), todo)
            for i, row in zip(todo, rows, strict=True):
                if row["fired"] >= 1:
                    last[i] = row["last_ms"]
        if len(last) < n:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{len(last)} of {n} alarms fired within 120 s")
            time.sleep(0.5)
    lateness = [ms - at for ms in last.values()]
    return n / (max(max(lateness), 1) / 1000), lateness


def _group_cpu_s(pgid: int) -> float:
    """CPU seconds used so far by the processes of group ``pgid`` (a peer and its children)."""
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def cold_burst(peer: str, modules: Path, work: Path, n: int, lead_ms: int,
               ) -> tuple[float, float]:
    """N tickers with their alarm at one instant T, the peer stopped before T and started again
    on the same storage after it: every alarm overdue at start on an object not in memory.
    (fired/s: N over the last handler's start - the spawn; the first handler's start - the
    spawn, in ms)."""
    storage = Path(tempfile.mkdtemp(prefix=f"{peer}-cold-", dir=work))
    try:
        port, spawned = free_port(), time.perf_counter()
        proc = spawn(peer, modules, port, storage)
        try:
            first_answer_ms(proc, spawned, port)
            at = made_with_alarm(port, n, lead_ms)
        finally:
            stop(proc)  # before T: nothing fired, nothing stays in memory
        # Written to disk before the restart, as a sleeping object's storage is and as ours'
        # population is before its burst (session 17): a restart just after the objects were
        # made would open files whose pages had not been written back yet, a cheaper state.
        os.sync()
        time.sleep(max(0.0, (at - time.time_ns() // 1_000_000) / 1000) + 0.5)
        port, spawned, spawned_ms = free_port(), time.perf_counter(), time.time_ns() / 1e6
        proc = spawn(peer, modules, port, storage)
        try:
            first_answer_ms(proc, spawned, port)
            # The burst is over once the peer's processes used no CPU for a second: reading the
            # objects back sooner would touch (open) those still waiting for their alarm.
            used, still, deadline = -1.0, time.perf_counter(), time.perf_counter() + 300
            while time.perf_counter() - still < 1.0:
                time.sleep(0.1)
                now_used = _group_cpu_s(proc.pid)
                if now_used != used:
                    used, still = now_used, time.perf_counter()
                if time.perf_counter() > deadline:
                    raise RuntimeError("the peer was still busy 300 s after its restart")
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                rows = list(pool.map(lambda i: get(port, f"/read?i={i}"), range(n)))
        finally:
            stop(proc)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    fired = [int(row["last_ms"]) for row in rows if row["fired"] >= 1]
    if len(fired) < n:
        raise RuntimeError(f"{len(fired)} of {n} overdue alarms fired after the restart")
    return n / (max(max(fired) - spawned_ms, 1) / 1000), min(fired) - spawned_ms


def run_peer(peer: str, modules: Path, work: Path, n: int, starts: int, lead_ms: int,
             starts_only: bool, cold_n: int = 0) -> dict[str, float]:
    """One round of one peer: ``starts`` starts (the first one's process then takes the burst)."""
    start_ms: list[float] = []
    rate, lateness = 0.0, [0]
    for k in range(starts):
        storage = Path(tempfile.mkdtemp(prefix=f"{peer}-", dir=work))
        port = free_port()
        spawned = time.perf_counter()
        proc = spawn(peer, modules, port, storage)
        try:
            start_ms.append(first_answer_ms(proc, spawned, port))
            if k == 0 and not starts_only:
                rate, lateness = burst(port, n, lead_ms)
        finally:
            stop(proc)
            shutil.rmtree(storage, ignore_errors=True)
    if starts_only:
        return {"start_to_first_answer_ms": median(start_ms)}
    got = {"alarm_burst_per_s": rate, "alarm_burst_lateness_p99_ms": percentile(lateness, 99),
           "start_to_first_answer_ms": median(start_ms)}
    if cold_n:
        got["cold_alarms_per_s"], got["cold_first_alarm_ms"] = cold_burst(peer, modules, work,
                                                                         cold_n, lead_ms)
    return got


# ---- ours --------------------------------------------------------------------------------------

def parse_ours(lines: Iterable[str]) -> dict[str, float]:
    """``mailbox-actors bench --json`` lines -> {figure: value} of the figures the table shows;
    every one of ``OURS_FIGURES`` must be there."""
    got: dict[str, float] = {}
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        if doc.get("figure") in OURS_FIGURES and doc.get("value") is not None:
            got[doc["figure"]] = float(doc["value"])
    missing = [f for f in OURS_FIGURES if f not in got]
    if missing:
        raise RuntimeError(f"mailbox-actors bench gave no {', '.join(missing)}")
    return got


def ours_start_ms(python: Path, work: Path) -> float:
    """Milliseconds from spawning ``serve`` on a fresh data directory to the first answer of an
    object call through its HTTP API (a TenantQuota made by its ``init``), polled as the peers
    are: ``/healthz`` every 2 ms until it answers, then the call (its id lookup and the call)."""
    import anyio

    from mailbox_actors.rpc.client import Client

    data = Path(tempfile.mkdtemp(prefix="ours-", dir=work))
    port = free_port()
    spawned = time.perf_counter()
    proc = _session([str(python), "-m", "mailbox_actors", "serve", "--data", str(data),
                     "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    async def call() -> None:
        async with Client.from_data_dir(data, url=f"http://127.0.0.1:{port}") as c:
            oid = await c.id_from_name("tenant_quota", "start")
            await c.call("tenant_quota", oid, {"op": "init", "per_minute": 1_000_000,
                                               "per_day": 1_000_000}, tenant_id="t_bench")
    try:
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                try:
                    conn.request("GET", "/healthz")
                    if conn.getresponse().status == 200:
                        break
                finally:
                    conn.close()
            except OSError:
                pass
            if proc.poll() is not None or time.perf_counter() - spawned > 60:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"serve did not answer ({proc.returncode}): {err[-1500:]}")
            time.sleep(_POLL_S)
        anyio.run(call)
        return (time.perf_counter() - spawned) * 1000
    finally:
        stop(proc)
        shutil.rmtree(data, ignore_errors=True)


def run_ours(python: Path, work: Path, starts: int, starts_only: bool) -> dict[str, float]:
    """One ``mailbox-actors bench`` run of ``OURS_FIGURES`` with its scratch under ``work``
    (unless ``starts_only``), and ``starts`` of ``serve`` to an object call's answer."""
    ms = median([ours_start_ms(python, work) for _ in range(starts)])
    if starts_only:
        return {"start_to_first_answer_ms": ms}
    proc = _session([str(python), "-m", "mailbox_actors", "bench", "--quick", "--json",
                     "--dir", str(work), "--only", *OURS_FIGURES],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    out, err = proc.communicate()
    _LIVE.discard(proc.pid)
    if proc.returncode != 0:
        raise RuntimeError(f"mailbox-actors bench failed ({proc.returncode}): "
                           f"{err.decode(errors='replace')[-1500:]}")
    got = parse_ours(out.decode().splitlines())
    return {**got, "cold_alarms_per_s": got["alarms_fired_per_s"], "start_to_first_answer_ms": ms}


# ---- the table ---------------------------------------------------------------------------------

def summarize(rounds: list[dict[str, dict[str, float]]]) -> list[dict[str, Any]]:
    """Medians over the rounds: one row per figure, each side's value (None where a side does
    not measure it) and ours/workerd. ``alarm_burst_per_raw`` is each side's fire rate over raw
    ``sqlite3``'s rate in the same round (ours' ``raw_burst_tx_per_s``), where ours ran;
    ``cold_alarms_per_raw`` each side's rate on cold objects over raw ``sqlite3``'s open, write
    and close (ours' ``raw_open_write_close_per_s``)."""
    for r in rounds:
        raw = r.get("ours", {}).get("raw_burst_tx_per_s")
        raw_cycle = r.get("ours", {}).get("raw_open_write_close_per_s")
        for side in r:
            if raw and "alarm_burst_per_s" in r[side]:
                r[side]["alarm_burst_per_raw"] = r[side]["alarm_burst_per_s"] / raw
            if raw_cycle and "cold_alarms_per_s" in r[side]:
                r[side]["cold_alarms_per_raw"] = r[side]["cold_alarms_per_s"] / raw_cycle
    rows = []
    for name, unit in TABLE:
        row: dict[str, Any] = {"figure": name, "unit": unit}
        for side in ("ours", *PEERS):
            xs = [r[side][name] for r in rounds if side in r and name in r[side]]
            row[side] = median(xs) if xs else None
        row["ratio"] = (row["ours"] / row["workerd"] if row["ours"] is not None
                        and row["workerd"] else None)
        rows.append(row)
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
    head = ("figure", "unit", "ours", "workerd", "Miniflare", "ours/workerd")
    body = [(r["figure"], r["unit"], num(r["ours"]), num(r["workerd"]), num(r["miniflare"]),
             num(r["ratio"])) for r in rows]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(line, widths, strict=True)))
                     for line in (head, *body))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000,
                        help="objects in a peer's burst (ours: its --quick size, 1,000)")
    parser.add_argument("--starts", type=int, default=3, help="peer starts timed per round")
    parser.add_argument("--cold", type=int, default=3000, metavar="N",
                        help="objects in a peer's burst on cold objects (their alarms overdue "
                             "when the peer starts again; ours: alarms_fired_per_s, 20,000 "
                             "actors); 0: none")
    parser.add_argument("--lead-ms", type=int, default=1000,
                        help="how far ahead the burst's instant is set, beyond 1.5x the "
                             "time making the population took (touching N objects must end "
                             "before it)")
    parser.add_argument("--peers-only", action="store_true", help="do not run ours")
    parser.add_argument("--starts-only", action="store_true",
                        help="only the starts to a first object answer (no bursts, no bench run)")
    parser.add_argument("--dir", type=Path,
                        help="every side's files under DIR (default: the system's temporary "
                             "directory); the file system matters: workerd syncs each commit")
    parser.add_argument("--out", type=Path, help="JSON lines file (default under the cache)")
    parser.add_argument("--python", type=Path, default=REPO / ".venv" / "bin" / "python",
                        help="the interpreter that has mailbox-actors (default: .venv)")
    args = parser.parse_args(argv)
    try:
        if args.rounds < 1 or args.n < 1 or args.starts < 1 or args.cold < 0:
            raise CannotRun("--rounds, --n and --starts must be at least 1, --cold at least 0")
        if not args.peers_only and not args.python.exists():
            raise CannotRun(f"{args.python} does not exist: run `make venv` first")
        cache = cache_dir()
        modules = install(cache)
    except CannotRun as e:
        print(f"peers: {e}", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or cache / "runs" / f"peers-{stamp}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    sides = [*PEERS] + ([] if args.peers_only else ["ours"])
    load = os.getloadavg()
    rounds: list[dict[str, dict[str, float]]] = []
    signal.signal(signal.SIGINT, _end)
    signal.signal(signal.SIGTERM, _end)
    with out.open("w") as f, tempfile.TemporaryDirectory(prefix="peers-", dir=args.dir) as tmp:
        _WORK.append(Path(tmp))
        f.write(json.dumps({"meta": {"workerd": WORKERD_VERSION, "miniflare": MINIFLARE_VERSION,
                                     "node": subprocess.run(["node", "--version"],
                                                            capture_output=True,
                                                            text=True).stdout.strip(),
                                     "n": args.n, "cold": args.cold, "rounds": args.rounds,
                                     "started": stamp,
                                     "dir": tmp, "load_before": load}}) + "\n")
        for r in range(args.rounds):
            got: dict[str, dict[str, float]] = {}
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            for side in order:
                print(f"peers: round {r + 1}: {side} (load {os.getloadavg()[0]:.1f})",
                      file=sys.stderr)
                try:
                    got[side] = (run_ours(args.python, Path(tmp), args.starts, args.starts_only)
                                 if side == "ours" else
                                 run_peer(side, modules, Path(tmp), args.n, args.starts,
                                          args.lead_ms, args.starts_only, args.cold))
                except RuntimeError as e:
                    print(f"peers: {side} failed: {e}", file=sys.stderr)
                    return 1
                for name, value in got[side].items():
                    f.write(json.dumps({"round": r + 1, "side": side, "figure": name,
                                        "value": value}) + "\n")
                f.flush()
            rounds.append(got)
        rows = summarize(rounds)
        for row in rows:
            f.write(json.dumps({"summary": row}) + "\n")
        f.write(json.dumps({"meta": {"load_after": os.getloadavg()}}) + "\n")
    print(format_table(rows))
    print(f"\nmedians of {args.rounds} rounds; load average {load[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after ({os.cpu_count()} cores); workerd {WORKERD_VERSION}, "
          f"Miniflare {MINIFLARE_VERSION}; every measurement in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
