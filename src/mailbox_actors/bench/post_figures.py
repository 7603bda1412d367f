"""Post deliveries/s between two actors on one node, in order, beside the runtime's durable state
changes/s measured in the same run (SPEC section 12).

A producer actor sends a run of events to one receiver address, 100 sends per producer
transaction, and its own alarm delivers them through the router (claim, receiver transaction,
settlement: the whole Post path). Deliveries/s is the events delivered over the time from the
first send to the last admission. The receiver checks the order of every admission; a broken
order fails the figure. The state-change limit is ``tenant_quota.reserve`` through the same
in-process RPC path, in rounds interleaved with Post's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio
import msgspec

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median
from mailbox_actors.bench.runtime_figures import BIG_LIMIT, envelope
from mailbox_actors.bench.runtime_figures import NS as QUOTA_NS
from mailbox_actors.node import Node
from mailbox_actors.objects import TenantQuota
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.actor_post import Post
from mailbox_actors.post.receiver import receive
from mailbox_actors.post.routes import Route, Routes
from mailbox_actors.post.sql import POST_RECEIVER_SCHEMA, POST_RUNS, POST_SCHEMA
from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.errors import InvalidRequest
from mailbox_actors.wire.post import PostDeliver, PostEnvelope
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve

__all__ = ["POST_FIGURES", "post_figures"]

POST_FIGURES: tuple[str, ...] = ("post_deliveries_per_s", "post_runtime_state_changes_per_s")
SEND_BATCH = 100


class _Inbox(msgspec.Struct, frozen=True):
    name: str


class _Tick(msgspec.Struct, frozen=True):
    n: int


class _Init(msgspec.Struct, tag="init", tag_field="op"):
    pass


class _SendRun(msgspec.Struct, tag="send_run", tag_field="op"):
    run: int
    start: int
    count: int


class _Receiver:
    """What the receiving side saw, for the order check (the bench's own process only)."""

    def __init__(self) -> None:
        self.expected = 0
        self.last = (-1, -1)
        self.broken = 0
        self.done = anyio.Event()

    def arm(self, run: int, count: int) -> None:
        self.expected, self.last, self.done = count, (run, -1), anyio.Event()


STATE = _Receiver()


class BenchReceiver(Actor):
    namespace = "bench_post_receiver"
    requests = _Init | PostDeliver
    init_request = _Init
    migrations = (Migration(1, ("CREATE TABLE got (key TEXT PRIMARY KEY)",
                                *POST_RECEIVER_SCHEMA)),)

    async def handle(self, call: Call, req: Any) -> Any:
        if isinstance(req, PostDeliver):
            return receive(self.sql, req, ROUTES, self._apply)
        if isinstance(req, _Init):
            return self.sql.transaction_sync(lambda tx: self.ctx.claim_owner(call))
        raise InvalidRequest("unknown op")

    @staticmethod
    def _apply(tx: SqlStorage, route: Route[Any, Any], address: Any, event: Any,
               env: PostEnvelope) -> None:
        tx.exec("INSERT INTO got (key) VALUES (?)", env.key)
        run, n = STATE.last
        here = (int(env.key.split("-")[1]), event.n)
        if here != (run, n + 1):
            STATE.broken += 1
        STATE.last = here
        if here[1] + 1 == STATE.expected:
            STATE.done.set()


TICK: Route[_Inbox, _Tick] = Route("tick", _Inbox, _Tick, namespace="bench_post_receiver",
                                   object_name=lambda a: a.name, address_kind="inbox")
ROUTES = Routes(TICK)


class BenchProducer(Actor):
    namespace = "bench_post_producer"
    requests = _Init | _SendRun
    init_request = _Init
    migrations = (Migration(1, POST_SCHEMA), Migration(2, POST_RUNS))
    alarm_purposes: ClassVar[Mapping[str, str]] = {"post": "post_tick"}

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.post = Post(self, ROUTES)

    async def post_tick(self) -> None:
        await self.post.run()

    async def handle(self, call: Call, req: Any) -> Any:
        if isinstance(req, _SendRun):
            def send(tx: SqlStorage) -> int:
                for i in range(req.start, req.start + req.count):
                    self.post.send(tx, TICK, _Inbox("r"), _Tick(i), f"run-{req.run}-{i:07d}")
                return req.count
            return self.sql.transaction_sync(send)
        if isinstance(req, _Init):
            return self.sql.transaction_sync(lambda tx: self.ctx.claim_owner(call))
        raise InvalidRequest("unknown op")


def _ok(out: bytes) -> None:
    if not out.startswith(b'{"ok"'):
        raise RuntimeError(f"benchmark call failed: {out[:300]!r}")


async def _post_round(node: Node, producer: str, run: int, n: int) -> float:
    STATE.arm(run, n)
    t = time.perf_counter()
    for start in range(0, n, SEND_BATCH):
        _ok(await node.call_bytes(BenchProducer.namespace, producer, envelope(
            _SendRun(run=run, start=start, count=min(SEND_BATCH, n - start)))))
    with anyio.fail_after(120):
        await STATE.done.wait()
    return n / (time.perf_counter() - t)


async def _state_round(node: Node, oid: str, run: int, n: int) -> float:
    bodies = [envelope(QuotaReserve(key=f"p{run}k{i}"), i) for i in range(n)]
    t = time.perf_counter()
    for body in bodies:
        out = await node.call_bytes(QUOTA_NS, oid, body)
        if not out.startswith(b'{"ok"'):
            _ok(out)
    return n / (time.perf_counter() - t)


async def post_figures(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                       _errors: list[str]) -> list[Figure]:
    n = max(200, sizes.state_calls // 2)
    rounds = max(3, sizes.rounds)
    progress.say(f"post: {rounds} interleaved rounds of {n:,} Post deliveries and {n:,} "
                 "reserve calls")
    STATE.broken = 0
    post_rates: list[float] = []
    state_rates: list[float] = []
    async with Node(RuntimeSettings(data_dir=str(work / "node")),
                    objects=(TenantQuota, BenchProducer, BenchReceiver)) as node:
        quota = node.id_from_name(QUOTA_NS, "post-bench")
        _ok(await node.call_bytes(QUOTA_NS, quota, envelope(QuotaInit(per_minute=BIG_LIMIT,
                                                                       per_day=BIG_LIMIT))))
        producer = node.id_from_name(BenchProducer.namespace, "p")
        _ok(await node.call_bytes(BenchProducer.namespace, producer, envelope(_Init())))
        _ok(await node.call_bytes(BenchReceiver.namespace,
                                  node.id_from_name(BenchReceiver.namespace, "r"),
                                  envelope(_Init())))
        await _post_round(node, producer, 0, min(n, 300))  # warm both paths before timing
        await _state_round(node, quota, 0, min(n, 300))
        for r in range(1, rounds + 1):
            if r % 2:
                post_rates.append(await _post_round(node, producer, r, n))
                state_rates.append(await _state_round(node, quota, r, n))
            else:
                state_rates.append(await _state_round(node, quota, r, n))
                post_rates.append(await _post_round(node, producer, r, n))
            progress.say(f"  round {r}/{rounds}: Post {post_rates[-1]:,.0f} deliveries/s, "
                         f"state changes {state_rates[-1]:,.0f}/s")
    post, state = median(post_rates), median(state_rates)
    order = ("order checked at every admission: never broken" if not STATE.broken
             else f"ORDER BROKEN {STATE.broken} times")
    deliveries = figure(
        "post_deliveries_per_s", post, "deliveries/s", goal=Goal("ratio_at_least", 0.3),
        limit=state, note=(f"one producer actor to one receiver address on one node, {n:,} "
                           f"events per round sent {SEND_BATCH} per producer transaction and "
                           f"delivered by the producer's alarm through the router (claim, "
                           f"receiver transaction with admit_post, settlement); from first "
                           f"send to last admission; median of {rounds} rounds; {order}"))
    if STATE.broken:
        deliveries.passed = False
    limit = figure("post_runtime_state_changes_per_s", state, "tx/s", note=(
        f"tenant_quota.reserve through the in-process RPC path, in rounds interleaved with "
        f"Post's; median of {rounds} rounds of {n:,}"))
    limit.target = "reference (the limit of post_deliveries_per_s)"
    return [deliveries, limit]
