"""The request-path figures: durable state changes/s and cold activation, each beside raw ``sqlite3``.

Each runtime figure is measured interleaved with its physical limit (same machine, same run, same
statements, similar files) and both sides report medians. Nothing here may make the runtime look
faster than it is: the runtime side always goes through ``Node.call_bytes``, the whole RPC path.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import msgspec

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median
from mailbox_actors.core.rate_windows import DAY, MINUTE
from mailbox_actors.node import Node
from mailbox_actors.objects import TenantQuota
from mailbox_actors.objects.shared_schema import RATE_WINDOW_BUCKETS as _BUCKETS
from mailbox_actors.objects.shared_schema import RATE_WINDOW_BUCKETS_BOTH as _BUCKETS_BOTH
from mailbox_actors.objects.shared_schema import RATE_WINDOW_BUMP as _BUMP
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.envelope import Envelope
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaUsage

__all__ = [
    "RAW_INSERT", "RAW_LIMITS", "RAW_PRIOR", "cold_activation", "envelope", "open_raw_quota",
    "raw_reserve_tx", "raw_usage_read", "state_changes",
]

NS = TenantQuota.namespace
TENANT = "t_bench"
FAR_DEADLINE_MS = 4_102_444_800_000  # 2100-01-01: no request in the benchmark runs out of time
BIG_LIMIT = 1_000_000_000
# TenantQuota.reserve's other two statements (a test checks they are still the object's own).
RAW_PRIOR = "SELECT reservation_id, count, released FROM reservations WHERE key = ?"
RAW_LIMITS = "SELECT per_minute, per_day FROM limits WHERE id = 1"
RAW_INSERT = ("INSERT INTO reservations (key, reservation_id, count, minute_start, day_start, "
              "created_ms) VALUES (?, ?, ?, ?, ?, ?)")

_ENC = msgspec.json.Encoder()


def envelope(req: object, n: int = 0) -> bytes:
    return _ENC.encode(Envelope(v=1, tenant_id=TENANT, request_id=f"req_b{n}",
                                deadline_ms=FAR_DEADLINE_MS, req=req))


def _ok(out: bytes) -> None:
    if not out.startswith(b'{"ok"'):
        raise RuntimeError(f"benchmark call failed: {out[:300]!r}")


# ---- durable state changes/s ---------------------------------------------------------------


def open_raw_quota(path: Path) -> sqlite3.Connection:
    """A plain connection on TenantQuota's schema: WAL, synchronous=NORMAL, explicit BEGIN."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    for m in TenantQuota.migrations:
        for stmt in m.statements:
            conn.execute(stmt)
    conn.execute("INSERT INTO limits (id, per_minute, per_day) VALUES (1, ?, ?)",
                 (BIG_LIMIT, BIG_LIMIT))
    return conn


def raw_reserve_tx(conn: sqlite3.Connection, key: str, rid: str) -> None:
    """One ``reserve`` as raw SQL: exactly the statements TenantQuota runs, in one transaction."""
    ex = conn.execute
    ex("BEGIN")
    ex(RAW_PRIOR, (key,)).fetchall()
    now = time.time_ns() // 1_000_000
    ex(_BUCKETS, (MINUTE.scope, now - MINUTE.window_ms - MINUTE.bucket_ms)).fetchall()
    ex(_BUCKETS, (DAY.scope, now - DAY.window_ms - DAY.bucket_ms)).fetchall()
    m, d = now - now % MINUTE.bucket_ms, now - now % DAY.bucket_ms
    ex(RAW_INSERT, (key, rid, 1, m, d, now))
    ex(_BUMP, (MINUTE.scope, m, 1))
    ex(_BUMP, (DAY.scope, d, 1))
    ex("COMMIT")


async def _runtime_round(node: Node, oid: str, bodies: list[bytes]) -> float:
    call = node.call_bytes
    t = time.perf_counter()
    for body in bodies:
        out = await call(NS, oid, body)
        if not out.startswith(b'{"ok"'):
            _ok(out)
    return len(bodies) / (time.perf_counter() - t)


def _raw_round(conn: sqlite3.Connection, keys: list[tuple[str, str]]) -> float:
    tx = raw_reserve_tx
    t = time.perf_counter()
    for key, rid in keys:
        tx(conn, key, rid)
    return len(keys) / (time.perf_counter() - t)


async def state_changes(work_dir: Path, sizes: Sizes, progress: Progress) -> list[Figure]:
    """``tenant_quota.reserve`` through the whole RPC path vs. the same SQL on one connection."""
    n, rounds = sizes.state_calls, sizes.rounds
    progress.say(f"state changes: {rounds} interleaved rounds of {n} reserve calls, runtime vs raw")
    raw_dir = work_dir / "raw"
    raw_dir.mkdir(parents=True)
    conn = open_raw_quota(raw_dir / "quota.sqlite")
    rt_rates: list[float] = []
    raw_rates: list[float] = []
    async with Node(RuntimeSettings(data_dir=str(work_dir / "node")),
                    objects=(TenantQuota,)) as node:
        oid = node.id_from_name(NS, "state-changes")
        _ok(await node.call_bytes(NS, oid, envelope(QuotaInit(per_minute=BIG_LIMIT,
                                                                per_day=BIG_LIMIT))))
        # Warm both sides (statement caches, page cache) before anything is timed.
        await _runtime_round(node, oid, [envelope(QuotaReserve(key=f"w{i}"), i)
                                         for i in range(min(n, 500))])
        _raw_round(conn, [(f"w{i}", f"rsv_w{i:022d}") for i in range(min(n, 500))])
        for r in range(rounds):
            bodies = [envelope(QuotaReserve(key=f"r{r}k{i}"), i) for i in range(n)]
            keys = [(f"r{r}k{i}", f"rsv_{r:04d}{i:022d}") for i in range(n)]
            # Alternate which side goes first, so neither always inherits the other's leftovers.
            if r % 2 == 0:
                rt_rates.append(await _runtime_round(node, oid, bodies))
                raw_rates.append(_raw_round(conn, keys))
            else:
                raw_rates.append(_raw_round(conn, keys))
                rt_rates.append(await _runtime_round(node, oid, bodies))
            progress.say(f"  round {r + 1}/{rounds}: runtime {rt_rates[-1]:,.0f}/s, "
                         f"raw {raw_rates[-1]:,.0f}/s")
    conn.close()
    rt, raw = median(rt_rates), median(raw_rates)
    note = f"median of {rounds} interleaved rounds of {n} transactions"
    return [
        figure("state_changes_per_s", rt, "tx/s", goal=Goal("ratio_at_least", 0.5), limit=raw,
               note=note),
        figure("raw_sqlite_tx_per_s", raw, "tx/s", note=note + "; same statements, one connection"),
    ]


# ---- cold activation -----------------------------------------------------------------------


async def _make_quota_actors(node: Node, count: int, rows: int, progress: Progress) -> list[str]:
    init = envelope(QuotaInit(per_minute=BIG_LIMIT, per_day=BIG_LIMIT))
    oids = []
    for i in range(count):
        oid = node.id_from_name(NS, f"cold-{i}")
        _ok(await node.call_bytes(NS, oid, init))
        for j in range(rows):
            _ok(await node.call_bytes(NS, oid, envelope(QuotaReserve(key=f"k{j}"), j)))
        oids.append(oid)
        progress.tick("  created {:,}/{:,} quota actors", i + 1, count)
    return oids


async def _alarms_settled(node: Node, timeout_s: float = 10.0) -> None:
    """Until no alarm is due: the outbox alarms the inits armed (due at once) run before the timed
    phase, not in it, where each opened an evicted actor's file beside a timed call (8 of 300 did
    in a quick run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = node.clock.now_ms()
        if not any(entry.at <= now for entry in node.alarm_book.entries.values()):
            return
        await anyio.sleep(0.01)


def raw_usage_read(conn: sqlite3.Connection) -> None:
    """The reads of TenantQuota's ``usage`` op: its limits row and both windows' buckets."""
    now = time.time_ns() // 1_000_000
    conn.execute(RAW_LIMITS).fetchall()
    conn.execute(_BUCKETS_BOTH, (MINUTE.scope, now - MINUTE.window_ms - MINUTE.bucket_ms,
                                 DAY.scope, now - DAY.window_ms - DAY.bucket_ms)).fetchall()


async def cold_activation(work_dir: Path, sizes: Sizes, progress: Progress) -> list[Figure]:
    """Open an evicted actor with data and do a first read, vs. connect + one SELECT.

    Each actor is opened once, alternating sides, so both see the same OS cache state. Closing is
    timed on neither side (the runtime closes on eviction, measured nowhere here).
    """
    c = sizes.cold_actors
    progress.say(f"cold activation: creating {2 * c:,} tenant_quota actors with "
                 f"{sizes.cold_rows} reservations each")
    usage = envelope(QuotaUsage())
    rt_ns: list[int] = []
    raw_ns: list[int] = []
    async with Node(RuntimeSettings(data_dir=str(work_dir / "node"), max_active_actors=64),
                    objects=(TenantQuota,)) as node:
        oids = await _make_quota_actors(node, 2 * c, sizes.cold_rows, progress)
        await _alarms_settled(node)
        node.host.evict_all_idle()
        runtime_side, raw_side = oids[:c], [node.host.path_for(NS, o) for o in oids[c:]]
        progress.say(f"cold activation: opening {c:,} actors through the runtime and {c:,} files "
                     "raw, alternating")
        perf = time.perf_counter_ns
        for i in range(c):
            for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                if side == 0:
                    t = perf()
                    out = await node.call_bytes(NS, runtime_side[i], usage)
                    rt_ns.append(perf() - t)
                    _ok(out)
                    node.host.evict_all_idle()
                else:
                    t = perf()
                    conn = sqlite3.connect(raw_side[i])
                    raw_usage_read(conn)
                    raw_ns.append(perf() - t)
                    conn.close()
    rt, raw = median(rt_ns) / 1000, median(raw_ns) / 1000
    note = f"median of {c} actors per side, each opened once; close timed on neither side"
    return [
        figure("cold_activation_us", rt, "us", goal=Goal("ratio_at_most", 1.5), limit=raw,
               note=note + "; ratio = runtime/raw, lower is better"),
        figure("raw_open_read_us", raw, "us", note=note + "; sqlite3.connect + the same reads as usage"),
    ]
