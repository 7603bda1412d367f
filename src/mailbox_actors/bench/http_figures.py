"""The HTTP figures (PERF, SPEC section 12; RPC-7, RPC-8): RPC calls/s with p50/p99 through the
project's client, to one node and to a three-node local cluster, beside a bare TCP echo of the same
bytes at the same concurrency measured in the same run.

Every server runs in a process of its own, started here: the node by ``mailbox-actors serve``, the
cluster by ``mailbox-actors cluster``, the two echoes by ``transport.spawn_server`` (on uvloop when
the node is, so both sides are served alike). Every client runs in this process's loop through the
same driver (``transport.measure_calls``, 32 callers back to back). The bytes the echo moves are
the bytes of one real call, captured on the wire by a relay, so the echo and the RPC move the same
request and reply.

The calls are ``tenant_quota.usage`` on 32 initialised actors, one caller each at a time: the whole
RPC path (client, HTTP, decode, route, owner and deadline checks, the actor's reads, encode) without
a commit, whose cost ``state_changes_per_s`` already holds against raw SQLite. ``reserve`` with a new
key each call (a durable write) is measured beside it as ``*_writes_per_s``, with no target of its own.

Two echoes are measured (ADR 0003): the anyio-stream echo is the figure issue 3 quotes (about 13,000
round trips/s on asyncio, 32,000 on uvloop) and the target (>= 0.5) is judged against it; the
``asyncio.Protocol`` echo is the strict limit, printed beside it so nobody reads the easier ratio as
the stricter one. Rounds are interleaved, the order rotating, and every figure is a median of rounds.

The server processes are ``servers``'s (shared with the event figures).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
from anyio.abc import SocketAttribute, SocketStream

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median
from mailbox_actors.bench.servers import (
    HOST,
    cpu_seconds,
    start_cluster,
    start_node,
    stop_spawned,
)
from mailbox_actors.bench.transport import measure_calls, spawn_server, tcp_echo
from mailbox_actors.http.server import loop_backend_options
from mailbox_actors.rpc import Client
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaUsage

__all__ = [
    "CLUSTER_FIGURES",
    "HTTP_FIGURES",
    "NODE_FIGURES",
    "HttpPlan",
    "capture_call_bytes",
    "http_figures",
    "http_plan",
    "init_quota_tenants",
    "quota_caller",
]

NODE_FIGURES = ("http_rpc_calls_per_s", "http_rpc_p50_ms", "http_rpc_p99_ms", "http_rpc_writes_per_s",
                "tcp_echo_anyio_per_s", "tcp_echo_protocol_per_s")
CLUSTER_FIGURES = ("cluster_rpc_calls_per_s", "cluster_rpc_p50_ms", "cluster_rpc_p99_ms",
                   "cluster_rpc_writes_per_s")
HTTP_FIGURES = NODE_FIGURES + CLUSTER_FIGURES

NS = "tenant_quota"
BIG_LIMIT = 1_000_000_000
CONCURRENCY = 32  # SPEC section 12: 32 concurrent callers
_JUDGED = ">= 0.5 of limit (the anyio echo)"


# ---- sizes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpPlan:
    rounds: int  # interleaved rounds per phase; every figure is the median of its rounds
    seconds: float  # timed length of one side of one round
    warmup_s: float  # untimed start of each side of each round
    concurrency: int = CONCURRENCY
    cluster_nodes: int = 3


_PLANS = {
    "full": HttpPlan(rounds=5, seconds=3.0, warmup_s=0.5),
    "quick": HttpPlan(rounds=3, seconds=1.5, warmup_s=0.3),
    "tiny": HttpPlan(rounds=1, seconds=0.3, warmup_s=0.1, concurrency=8),
}


def http_plan(sizes: Sizes) -> HttpPlan:
    """The HTTP sizes for a run: ``sizes.name`` picks them (unknown names get the quick ones)."""
    return _PLANS.get(sizes.name, _PLANS["quick"])


# ---- the calls -----------------------------------------------------------------------------


async def init_quota_tenants(client: Client, count: int, prefix: str) -> tuple[list[str], list[str]]:
    """``count`` TenantQuota actors (ids by name), each initialised for its own tenant with limits
    no benchmark reaches. Returns (object ids, tenant ids)."""
    tenants = [f"t_bench{i:04d}" for i in range(count)]
    oids = [await client.id_from_name(NS, f"{prefix}-{i}") for i in range(count)]
    init = QuotaInit(per_minute=BIG_LIMIT, per_day=BIG_LIMIT)
    for oid, tenant in zip(oids, tenants, strict=True):
        await client.call(NS, oid, init, tenant_id=tenant)
    return oids, tenants


def _key(n: int) -> str:
    return f"k{n:012d}"  # one length for every call: the echo moves the bytes of one of them


def quota_caller(client: Client, oids: Sequence[str], tenants: Sequence[str], op: str = "usage"
                 ) -> Callable[[], Awaitable[None]]:
    """``usage`` (reads), or ``reserve`` with a new key (a durable write), on a tenant no other
    caller is using at that moment."""
    if op not in ("usage", "reserve"):
        raise ValueError("op is 'usage' or 'reserve'")
    free = list(range(len(oids)))
    seq = itertools.count(1)
    call_ = client.call
    usage = QuotaUsage()
    write = op == "reserve"

    async def call() -> None:
        i = free.pop()
        try:
            await call_(NS, oids[i], QuotaReserve(key=_key(next(seq))) if write else usage,
                        tenant_id=tenants[i])
        finally:
            free.append(i)

    return call


async def capture_call_bytes(owner_url: str, token: str, oid: str, tenant: str
                             ) -> tuple[bytes, bytes]:
    """The wire bytes of one ``usage`` call through the project's client: a relay in front of the
    owner records what the client sent and what came back."""
    host, _, port_text = owner_url.removeprefix("http://").rpartition(":")
    sent = bytearray()
    back = bytearray()

    async def pump(src: SocketStream, dst: SocketStream, buf: bytearray) -> None:
        try:
            async for chunk in src:
                buf += chunk
                await dst.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass

    async def relay(down: SocketStream) -> None:
        async with down, await anyio.connect_tcp(host, int(port_text)) as up, \
                anyio.create_task_group() as tg:
            tg.start_soon(pump, up, down, back)
            await pump(down, up, sent)
            tg.cancel_scope.cancel()

    listener = await anyio.create_tcp_listener(local_host=HOST, local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, relay)
        url = f"http://{HOST}:{listener.extra(SocketAttribute.local_port)}"
        async with Client(url, token) as client:
            await client.call(NS, oid, QuotaUsage(), tenant_id=tenant)
        tg.cancel_scope.cancel()
    if not sent.startswith(b"POST /rpc/") or not back.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("the relay did not see one RPC call and its answer")
    return bytes(sent), bytes(back)


# ---- rounds --------------------------------------------------------------------------------

Side = Callable[[], Awaitable[dict[str, float]]]


def _with_server_cpu(side: Side, pids: Callable[[], Sequence[int]], plan: HttpPlan) -> Side:
    """``side`` plus ``server_cpu_us_per_call``: the server processes' CPU over the round, per call
    (calls over the warm-up estimated at the timed rate)."""

    async def run() -> dict[str, float]:
        before = cpu_seconds(pids())
        result = await side()
        after = cpu_seconds(pids())
        calls = result["calls_per_s"] * (plan.seconds + plan.warmup_s)
        if before is not None and after is not None and calls:
            result["server_cpu_us_per_call"] = (after - before) / calls * 1e6
        return result

    return run


async def _rounds(sides: dict[str, Side], plan: HttpPlan, label: str, progress: Progress
                  ) -> dict[str, list[dict[str, float]]]:
    """Every side once per round, the order rotating so no side always follows the same one."""
    names = list(sides)
    got: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for r in range(plan.rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            got[name].append(await sides[name]())
        progress.say(f"  {label} round {r + 1}/{plan.rounds}: " + ", ".join(
            f"{n} {got[n][-1]['calls_per_s']:,.0f}/s" for n in names))
    return got


def _med(results: list[dict[str, float]], key: str) -> float:
    return median([r[key] for r in results if key in r])


def _cpu_text(results: list[dict[str, float]], what: str) -> str:
    server = [r["server_cpu_us_per_call"] for r in results if "server_cpu_us_per_call" in r]
    parts = [f"client CPU {_med(results, 'cpu_us_per_call'):.0f} us/call"]
    if server:
        parts.append(f"{what} CPU {median(server):.0f} us/call")
    return ", ".join(parts)


def _latency(name: str, value: float, echo: float, which: str) -> Figure:
    """A latency line: no target of its own; the echo's latency at the same concurrency as limit."""
    return Figure(figure=name, value=value, unit="ms", limit=echo,
                  ratio=value / echo if echo else None,
                  target=f"no target (limit: the anyio echo's {which})", passed=None)


def _errors_text(results: list[dict[str, float]]) -> str:
    failed = sum(int(r["errors"]) for r in results)
    return f"; {failed} calls FAILED" if failed else ""


# ---- the echoes ----------------------------------------------------------------------------


class _Echoes:
    """The two echo servers of a run, each in its own process, started once on the first call's
    bytes and stopped by pid at the end."""

    def __init__(self, uvloop: bool) -> None:
        self.uvloop = uvloop
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.ports: dict[str, int] = {}

    async def start(self, request: bytes, response: bytes) -> None:
        self.request, self.response = request, response
        for style, kind in (("protocol", "echo"), ("anyio", "echo_anyio")):
            if style not in self.procs:
                self.procs[style], self.ports[style] = await spawn_server(
                    kind, len(request), response, uvloop=self.uvloop)

    def side(self, style: str, plan: HttpPlan) -> Side:
        async def run() -> dict[str, float]:
            return await tcp_echo(self.request, self.response, concurrency=plan.concurrency,
                                  seconds=plan.seconds, warmup_s=plan.warmup_s, host=HOST,
                                  port=self.ports[style], style=style)

        return _with_server_cpu(run, lambda: [self.procs[style].pid], plan)

    async def stop(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is not None:
                continue
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            with anyio.move_on_after(5):
                await proc.wait()
            if proc.returncode is None:
                os.kill(proc.pid, signal.SIGKILL)
                await proc.wait()


def _measured(call: Callable[[], Awaitable[object]], plan: HttpPlan) -> Side:
    async def run() -> dict[str, float]:
        return await measure_calls(call, concurrency=plan.concurrency, seconds=plan.seconds,
                                   warmup_s=plan.warmup_s)

    return run


# ---- the group -----------------------------------------------------------------------------


async def http_figures(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                       errors: list[str]) -> list[Figure]:
    """The figures of ``HTTP_FIGURES`` in ``want``: the one-node phase, then the cluster phase,
    each interleaved with its echoes. A phase that fails is reported in ``errors``; the other runs."""
    plan = http_plan(sizes)
    uvloop = bool(loop_backend_options())  # the node runs on uvloop when it can; so do the echoes
    echoes = _Echoes(uvloop)
    out: list[Figure] = []
    try:
        if want & set(NODE_FIGURES):
            try:
                out += await _node_phase(work, plan, progress, errors, echoes)
            except Exception as e:
                errors.append(f"http (one node): {type(e).__name__}: {e}")
                progress.say(f"http: one-node phase failed: {type(e).__name__}: {e}")
        if want & set(CLUSTER_FIGURES):
            try:
                out += await _cluster_phase(work, plan, progress, errors, echoes)
            except Exception as e:
                errors.append(f"http (cluster): {type(e).__name__}: {e}")
                progress.say(f"http: cluster phase failed: {type(e).__name__}: {e}")
    finally:
        with anyio.CancelScope(shield=True):
            await echoes.stop()
    return out


def _loop_name(echoes: _Echoes) -> str:
    return "uvloop" if echoes.uvloop else "asyncio"


def _client_loop() -> str:
    return "uvloop" if "uvloop" in type(asyncio.get_running_loop()).__module__ else "asyncio"


def _rpc_sides(client: Client, oids: list[str], tenants: list[str], plan: HttpPlan,
               pids: Callable[[], Sequence[int]], what: str) -> dict[str, Side]:
    """Reads on the first half of the actors, writes on the other half, so the reads' replies keep
    the length of the bytes the echo moves."""
    c = plan.concurrency
    read = quota_caller(client, oids[:c], tenants[:c], "usage")
    write = quota_caller(client, oids[c:], tenants[c:], "reserve")
    return {f"{what} read": _with_server_cpu(_measured(read, plan), pids, plan),
            f"{what} write": _with_server_cpu(_measured(write, plan), pids, plan)}


async def _node_phase(work: Path, plan: HttpPlan, progress: Progress, errors: list[str],
                      echoes: _Echoes) -> list[Figure]:
    node = await start_node(work / "node")
    progress.say(f"http: node pid {node.pid} at {node.urls[0]}; {plan.rounds} interleaved rounds "
                 f"of {plan.seconds:g} s per side, {plan.concurrency} callers")
    try:
        async with Client(node.urls[0], node.token) as client:
            oids, tenants = await init_quota_tenants(client, 2 * plan.concurrency, "http")
            if not echoes.procs:
                await echoes.start(*await capture_call_bytes(node.urls[0], node.token, oids[0],
                                                             tenants[0]))
            sides = {"protocol echo": echoes.side("protocol", plan),
                     "anyio echo": echoes.side("anyio", plan),
                     **_rpc_sides(client, oids, tenants, plan, node.server_pids, "rpc")}
            got = await _rounds(sides, plan, "http one node", progress)
    finally:
        with anyio.CancelScope(shield=True):
            errors.extend(await stop_spawned(node))
    proto, echo = got["protocol echo"], got["anyio echo"]
    p_cps, a_cps = _med(proto, "calls_per_s"), _med(echo, "calls_per_s")
    common = (f"{plan.concurrency} callers, median of {plan.rounds} interleaved rounds of "
              f"{plan.seconds:g} s (after {plan.warmup_s:g} s warm-up); servers in their own "
              f"processes on {_loop_name(echoes)}, clients in the bench process on "
              f"{_client_loop()}")
    where = (f"through mailbox_actors.rpc.Client to one `serve` process, {plan.concurrency} "
             f"tenant_quota actors per side; {common}")
    out = _rpc_figures("http_rpc", got["rpc read"], got["rpc write"], echo, p_cps, where, "node")
    echo_note = (f"the same bytes as one usage call ({len(echoes.request)} out, "
                 f"{len(echoes.response)} back); {common}")
    a = figure("tcp_echo_anyio_per_s", a_cps, "round trips/s",
               note=f"anyio streams at both ends, issue 3's figure (about 13k/s asyncio, 32k/s "
                    f"uvloop, one process); {echo_note}; {_cpu_text(echo, 'server')}")
    a.target = "reference (the limit judged against)"
    p = figure("tcp_echo_protocol_per_s", p_cps, "round trips/s",
               note=f"asyncio.Protocol at both ends, nothing parsed; {echo_note}; "
                    f"{_cpu_text(proto, 'server')}")
    p.target = "reference (the strict limit)"
    return [*out, a, p]


async def _cluster_phase(work: Path, plan: HttpPlan, progress: Progress, errors: list[str],
                         echoes: _Echoes) -> list[Figure]:
    cluster = await start_cluster(work / "cluster", plan.cluster_nodes)
    progress.say(f"http: cluster supervisor pid {cluster.pid}, node pids "
                 f"{', '.join(map(str, cluster.node_pids))}; {plan.rounds} interleaved rounds")
    try:
        async with Client.from_data_dir(cluster.data) as client:
            oids, tenants = await init_quota_tenants(client, 2 * plan.concurrency, "cluster")
            if not echoes.procs:  # the one-node phase did not run: take the bytes from the cluster
                await echoes.start(*await capture_call_bytes(
                    client.owner_url(NS, oids[0]), cluster.token, oids[0], tenants[0]))
            sides = {"anyio echo": echoes.side("anyio", plan),
                     "protocol echo": echoes.side("protocol", plan),
                     **_rpc_sides(client, oids, tenants, plan, cluster.server_pids, "cluster")}
            got = await _rounds(sides, plan, "http cluster", progress)
    finally:
        with anyio.CancelScope(shield=True):
            errors.extend(await stop_spawned(cluster))
    where = (f"through mailbox_actors.rpc.Client to a {plan.cluster_nodes}-node local cluster "
             f"(a process each, {_loop_name(echoes)}), the client routing straight to owners "
             f"(bench process, {_client_loop()}); {plan.concurrency} callers on as many "
             f"tenant_quota actors per side; median of {plan.rounds} "
             f"rounds of {plan.seconds:g} s interleaved with the echoes measured beside it in "
             f"this phase")
    return _rpc_figures("cluster_rpc", got["cluster read"], got["cluster write"],
                        got["anyio echo"], _med(got["protocol echo"], "calls_per_s"), where,
                        "all nodes")


def _rpc_figures(prefix: str, read: list[dict[str, float]], write: list[dict[str, float]],
                 echo: list[dict[str, float]], p_cps: float, where: str, server: str
                 ) -> list[Figure]:
    """calls/s (``usage``, judged against the anyio echo) with p50/p99, and writes/s (``reserve``)."""
    a_cps, cps, wps = (_med(x, "calls_per_s") for x in (echo, read, write))
    f = figure(f"{prefix}_calls_per_s", cps, "calls/s", goal=Goal("ratio_at_least", 0.5),
               limit=a_cps, note=(
                   f"tenant_quota.usage (decode, route, owner and deadline checks, the windows' "
                   f"SELECT, encode) {where}; judged against the anyio echo ({a_cps:,.0f}/s), issue 3's "
                   f"figure; against the "
                   f"protocol echo, the strict limit ({p_cps:,.0f}/s), the ratio is "
                   f"{cps / p_cps if p_cps else math.nan:.2f}; {_cpu_text(read, server)}"
                   f"{_errors_text(read)}"))
    f.target = _JUDGED
    w = Figure(figure=f"{prefix}_writes_per_s", value=wps, unit="calls/s", limit=a_cps,
               ratio=wps / a_cps if a_cps else None,
               target="no target (limit: the anyio echo)", passed=None,
               note=(f"tenant_quota.reserve with a new key each call, a durable state change (its "
                     f"SQLite commit is held against raw SQLite by state_changes_per_s), "
                     f"{where}; p50 {_med(write, 'p50_ms'):.2f} ms, p99 "
                     f"{_med(write, 'p99_ms'):.2f} ms; {_cpu_text(write, server)}"
                     f"{_errors_text(write)}"))
    return [f,
            _latency(f"{prefix}_p50_ms", _med(read, "p50_ms"), _med(echo, "p50_ms"), "p50"),
            _latency(f"{prefix}_p99_ms", _med(read, "p99_ms"), _med(echo, "p99_ms"), "p99"),
            w]
