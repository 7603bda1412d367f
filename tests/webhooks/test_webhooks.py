"""Webhooks (Q-4, EV-3): signed delivery to each tenant's endpoint, retries, dead letters, isolation.

Queue time is a FakeClock the tests advance; receivers are real HTTP servers on 127.0.0.1. The
example receiver (``examples/webhook_receiver.py``) is loaded from its file and used as a user would.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import itertools
import json
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import msgspec
import pytest
import structlog

from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import configure_logging
from mailbox_actors.platform.metrics import Metrics
from mailbox_actors.platform.queues import Consumer, DeadLetterRecorder, Message, QueueService
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.testing.ports import free_port
from mailbox_actors.webhooks.delivery import (
    DEFAULT_SCHEDULE_S,
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    SIGNATURE_HEADER,
    WebhookDeliverer,
    sign,
    verify,
)
from mailbox_actors.webhooks.publish import ControlEventSink
from mailbox_actors.webhooks.tenant_limits import TenantSlots
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.events import Event
from raw_endpoint import RawEndpoint

T0 = 1_767_225_600_000
SECRET = "whsec-0123456789abcdef"
OBJECT_ID = "a" * 64


def _load_example() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "examples" / "webhook_receiver.py"
    spec = importlib.util.spec_from_file_location("webhook_receiver_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look the module up by name
    spec.loader.exec_module(module)
    return module


example = _load_example()


def make_event(n: int, tenant_id: str) -> Event:
    return Event(id=f"evt_{tenant_id}_{n:04d}", type="identity.created", sequence=n,
                 tenant_id=tenant_id, identity_id="idn_1", occurred_at_ms=T0, data={"n": n})


# ---- receivers -----------------------------------------------------------------------------------


@dataclass
class Hit:
    at_ms: int
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """An endpoint on ``RpcHttpServer`` answering each POST with the next status of ``statuses``
    (then 200), or through the example receiver's ``receive`` when ``seen`` is given."""

    clock: FakeClock
    statuses: list[int] = field(default_factory=list)
    seen: Any = None
    hits: list[Hit] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    got: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> tuple[int, bytes, str]:
        self.hits.append(Hit(self.clock.now_ms(), path, dict(headers), body))
        if self.seen is not None:
            status = example.receive(SECRET, self.seen, headers, body,
                                     now_s=self.clock.now_ms() // 1000)
        else:
            status = self.statuses.pop(0) if self.statuses else 200
        self.answers.append(status)
        self.got.set()
        return status, b"", "text/plain"


class Scripted(RawEndpoint):
    """A raw HTTP endpoint that misbehaves on purpose, one behaviour per request: a status code,
    ``"close"`` (hang up without answering) or ``"hang"`` (never answer until stopped)."""

    def __init__(self, clock: FakeClock, script: list[int | str], *, then: int | str = 200) -> None:
        super().__init__()
        self.clock = clock
        self.script = script
        self.then = then
        self.hits: list[tuple[int, str | int]] = []
        self.hanging = 0

    async def answer(self, fields: dict[str, str], writer: asyncio.StreamWriter) -> bool:
        act = self.script.pop(0) if self.script else self.then
        self.hits.append((self.clock.now_ms(), act))
        if act == "hang":
            self.hanging += 1
            await self.hold()
        elif isinstance(act, int):
            writer.write(b"HTTP/1.1 %d X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % act)
            await writer.drain()
        return False


# ---- the cluster side ----------------------------------------------------------------------------


class World:
    """A control database, queues, a deliverer and its consumers on one FakeClock."""

    def __init__(self, tmp: Path, clock: FakeClock) -> None:
        self.clock = clock
        self.metrics = Metrics()
        self.db = ControlDb(tmp / "control.sqlite", clock=clock, ids=Ids(clock, SeededRng(1)))
        self.queues = QueueService(tmp / "queues.sqlite", clock=clock, ids=Ids(clock, SeededRng(2)),
                                   metrics=self.metrics)
        self.sink = ControlEventSink(self.db, self.queues)
        self.deliverers: list[WebhookDeliverer] = []
        self.attached: list[Consumer] = []

    def deliverer(self, **kw: Any) -> WebhookDeliverer:
        kw.setdefault("attempt_timeout_s", 0.3)
        kw.setdefault("jitter_fraction", 0.0)
        d = WebhookDeliverer(self.db, self.queues, clock=self.clock, rng=SeededRng(3),
                             metrics=self.metrics, **kw)
        self.deliverers.append(d)
        return d

    def attach(self, deliverer: WebhookDeliverer, count: int = 2) -> None:
        """Drive ``count`` consumers and the dead-letter recorder with the FakeClock."""
        consumers: list[Consumer] = deliverer.consumers(count=count)
        consumers.append(DeadLetterRecorder(self.queues, consumers[0].dead_letter_queue))
        for c in consumers:
            self.clock.attach(c)
        self.attached += consumers

    async def tenant(self, port: int | None, path: str = "/hooks") -> str:
        url = None if port is None else f"http://127.0.0.1:{port}{path}"
        t = await self.db.create_tenant(f"t{len(await self.db.list_tenants())}", webhook_url=url,
                                        webhook_secret=None if url is None else SECRET)
        return t.id

    async def emit(self, tenant_id: str, *ns: int) -> list[Event]:
        events = [make_event(n, tenant_id) for n in ns]
        await self.sink.publish("identity_mailbox", OBJECT_ID, events)
        return events

    async def close(self) -> None:
        for c in self.attached:
            self.clock.detach(c)
        for d in self.deliverers:
            await d.aclose()
        await self.queues.close()
        await self.db.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
async def world(tmp_path: Path, clock: FakeClock) -> AsyncIterator[World]:
    w = World(tmp_path, clock)
    await w.db.open()
    await w.queues.open()
    try:
        yield w
    finally:
        await w.close()


@contextlib.asynccontextmanager
async def serving(app: Any, port: int = 0) -> AsyncIterator[int]:
    server = RpcHttpServer(app)
    bound = await server.start("127.0.0.1", port)
    try:
        yield bound
    finally:
        await server.stop(grace_s=0.5)


@contextlib.asynccontextmanager
async def scripted(clock: FakeClock, script: list[int | str], *,
                   then: int | str = 200) -> AsyncIterator[tuple[Scripted, int]]:
    endpoint = Scripted(clock, script, then=then)
    port = await endpoint.start()
    try:
        yield endpoint, port
    finally:
        await endpoint.stop()


@pytest.fixture
def _reset_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


# ---- signatures ----------------------------------------------------------------------------------


def test_sign_verify_round_trip_and_tampering() -> None:
    """Q-4: a signature verifies for its body, secret and a fresh timestamp, and fails when the body,
    secret, timestamp or header is changed; the example receiver's verify agrees on every case."""
    body = b'{"id":"evt_1","type":"identity.created"}'
    header = sign(SECRET, 1_000, body)
    assert header.startswith("t=1000,v1=") and len(header.rpartition("v1=")[2]) == 64
    other = sign("another-secret-16chars", 1_000, body)
    cases: list[tuple[str, bytes, str, int, bool]] = [
        (SECRET, body, header, 1_000, True),
        (SECRET, body, header, 1_300, True),                      # at the tolerance
        (SECRET, body, header, 1_301, False),                     # stale: a replay
        (SECRET, body, header, 699, False),                       # from the future
        (SECRET, body + b" ", header, 1_000, False),              # body changed
        (SECRET, body.replace(b"1", b"2"), header, 1_000, False),
        ("another-secret-16chars", body, header, 1_000, False),   # wrong secret
        (SECRET, body, header.replace("t=1000", "t=1001"), 1_000, False),  # timestamp changed
        (SECRET, body, f"{other},{header.split(',')[1]}", 1_000, True),  # two v1: rotation
        (SECRET, body, other, 1_000, False),
        (SECRET, body, "", 1_000, False),
        (SECRET, body, "v1=" + "0" * 64, 1_000, False),
        (SECRET, body, "t=1000", 1_000, False),
        (SECRET, body, "t=abc,v1=zz", 1_000, False),
        (SECRET, body, "t=1000,v1=é" + "0" * 63, 1_000, False),
    ]
    for secret, b, h, now, expected in cases:
        assert verify(secret, h, b, now_s=now) is expected, (h, now)
        assert example.verify(secret, h, b, now_s=now) is expected, (h, now)


# ---- delivery ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_delivery_arrives_signed_and_verifies(world: World, clock: FakeClock) -> None:
    """Q-4: an outbox event reaches its tenant's endpoint as exactly the event JSON, POSTed with a
    signature that verifies, its id and type in headers, and is acked once answered 2xx."""
    receiver = Receiver(clock)
    async with serving(receiver) as port:
        tenant = await world.tenant(port, "/hooks/in?token=abc")
        world.attach(world.deliverer())
        [event] = await world.emit(tenant, 1)
        await clock.run_until_idle()
    [hit] = receiver.hits
    assert hit.at_ms == T0 and hit.path == "/hooks/in?token=abc"
    assert hit.headers["content-type"] == "application/json"
    assert hit.headers[EVENT_ID_HEADER] == event.id
    assert hit.headers[EVENT_TYPE_HEADER] == "identity.created"
    assert hit.body == msgspec.json.encode(event)
    assert json.loads(hit.body) == msgspec.to_builtins(event)
    assert verify(SECRET, hit.headers[SIGNATURE_HEADER], hit.body, now_s=T0 // 1000)
    assert hit.headers[SIGNATURE_HEADER].startswith(f"t={T0 // 1000},")
    assert world.metrics.get("webhooks_delivered_total") == 1
    assert await world.queues.depth("webhooks") == 0


@pytest.mark.anyio
async def test_three_failures_then_success_at_the_schedule(world: World, clock: FakeClock) -> None:
    """Q-4, EV-3: an endpoint that answers 500, then hangs up, then stays silent past the attempt
    timeout, then answers 200 is tried at 0, 1, 6 and 36 s and accepts the event exactly once."""
    async with scripted(clock, [500, "close", "hang", 200]) as (endpoint, port):
        tenant = await world.tenant(port)
        world.attach(world.deliverer())
        await world.emit(tenant, 1)
        await clock.run_until_idle()
        assert endpoint.hits == [(T0, 500)]
        await clock.advance(999)
        assert len(endpoint.hits) == 1
        await clock.advance(1)
        await clock.advance(5_000)   # the third attempt waits out the 0.3 s attempt timeout
        assert endpoint.hits[1:] == [(T0 + 1_000, "close"), (T0 + 6_000, "hang")]
        await clock.advance(29_999)
        assert len(endpoint.hits) == 3
        await clock.advance(1)
        await clock.advance(3_600_000)
    assert endpoint.hits[3:] == [(T0 + 36_000, 200)]
    assert world.metrics.get("webhooks_retried_total") == 3
    assert world.metrics.get("webhooks_delivered_total") == 1
    assert world.metrics.get("webhooks_failed_total") == 0
    assert await world.queues.depth("webhooks") == 0
    assert await world.queues.dead_letters("webhooks") == []


@pytest.mark.anyio
async def test_always_500_is_dead_lettered_and_other_tenants_are_not_delayed(
        world: World, clock: FakeClock) -> None:
    """Q-4: an endpoint that always answers 500 gets 1 + len(schedule) attempts spaced by the
    schedule (plus at most 10% jitter), then the event is dead-lettered with its reason, while
    another tenant's events sent meanwhile are delivered at once."""
    good = Receiver(clock)
    async with scripted(clock, [], then=500) as (bad, bad_port), serving(good) as good_port:
        tenant_a, tenant_b = await world.tenant(bad_port), await world.tenant(good_port)
        world.attach(world.deliverer(jitter_fraction=0.1))
        [lost] = await world.emit(tenant_a, 1)
        await world.emit(tenant_b, 1)
        await clock.run_until_idle()
        assert [h.at_ms for h in good.hits] == [T0]
        for n, step in enumerate((500, 45_000, 3_000_000), start=2):
            await clock.advance(step)
            await world.emit(tenant_b, n)
            await clock.run_until_idle()
            assert good.hits[-1].at_ms == clock.now_ms()  # not behind tenant A's retries
        await clock.advance(3 * 3_600_000)
    times = [t for t, _ in bad.hits]
    assert len(times) == 1 + len(DEFAULT_SCHEDULE_S)
    for gap, base in zip([b - a for a, b in itertools.pairwise(times)], DEFAULT_SCHEDULE_S,
                         strict=True):
        assert base * 1000 <= gap <= base * 1100, (gap, base)
    [letter] = await world.queues.dead_letters("webhooks")
    assert letter["reason"] == "http 500 after 8 attempts"
    assert letter["body"]["event"]["id"] == lost.id and letter["body"]["attempt"] == 7
    assert world.metrics.get("webhooks_failed_total") == 1
    assert world.metrics.get("webhooks_delivered_total") == 4
    assert await world.queues.depth("webhooks") == 0


@pytest.mark.anyio
async def test_endpoint_that_is_down_is_retried_until_it_is_up(world: World, clock: FakeClock) -> None:
    """Q-4: an endpoint with nothing listening is retried on the schedule, and the event is
    delivered once the receiver comes up."""
    port = free_port()
    tenant = await world.tenant(port)
    world.attach(world.deliverer())
    await world.emit(tenant, 1)
    await clock.run_until_idle()
    await clock.advance(1_000)
    assert world.metrics.get("webhooks_retried_total") == 2
    receiver = Receiver(clock)
    async with serving(receiver, port):
        await clock.advance(5_000)
    assert [h.at_ms for h in receiver.hits] == [T0 + 6_000]
    assert receiver.hits[0].headers["x-mailbox-actors-delivery-attempt"] == "3"
    assert world.metrics.get("webhooks_delivered_total") == 1


@pytest.mark.anyio
async def test_slow_endpoint_does_not_block_other_tenants(world: World, clock: FakeClock) -> None:
    """Q-4: with consumers running concurrently, a tenant whose endpoint never answers holds at
    most all but one consumer; its other events are deferred and another tenant is still served."""
    good = Receiver(clock)
    async with scripted(clock, [], then="hang") as (slow, slow_port), serving(good) as good_port:
        tenant_a, tenant_b = await world.tenant(slow_port), await world.tenant(good_port)
        deliverer = world.deliverer(attempt_timeout_s=20.0)
        b_done = anyio.Event()
        handle = deliverer.handle

        async def handle_and_note(msg: Message) -> None:
            await handle(msg)  # the consumer acks it after
            if msg.body["tenant_id"] == tenant_b:
                b_done.set()

        deliverer.handle = handle_and_note  # type: ignore[method-assign]
        consumers = deliverer.consumers(count=4)
        await world.emit(tenant_a, *range(1, 9))
        await world.emit(tenant_b, 1)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for c in consumers:
                    tg.start_soon(c.run)
                await b_done.wait()
                tg.cancel_scope.cancel()
        assert slow.hanging == 3
    assert [h.headers[EVENT_ID_HEADER] for h in good.hits] == [f"evt_{tenant_b}_0001"]
    assert world.metrics.get("webhooks_deferred_total") >= 1
    stats = (await world.queues.stats())["webhooks"]
    assert (stats["in_flight"], stats["delayed"], stats["ready"]) == (3, 5, 0)  # nothing of A lost


@pytest.mark.anyio
@pytest.mark.parametrize(("ran_s", "busy_s", "deferred_ms"), [
    ((), 0.3, 300), ((), 50.0, 10_000), ((10.0,), 0.3, 10_000), ((10.0, 0.1), 0.3, 300)],
    ids=["busy-a-moment", "hung", "hung-attempts-timed-out", "recovered"])
async def test_a_deferral_lasts_about_as_long_as_the_tenant_has_been_busy(
        world: World, clock: FakeClock, ran_s: tuple[float, ...], busy_s: float,
        deferred_ms: int) -> None:
    """Q-4: a tenant at its in-flight cap whose oldest attempt has run 0.3 s has its next event
    deferred 0.3 s; one whose attempt has run past the attempt timeout (a hung endpoint), or
    whose last finished attempt ran to the timeout, the attempt timeout, 10 s, until a finished
    attempt is fast again; the event is re-sent unchanged (still attempt 1), then delivered."""
    receiver = Receiver(clock)
    async with serving(receiver) as port:
        tenant = await world.tenant(port)
        deliverer = world.deliverer(attempt_timeout_s=10.0)
        now = 100.0  # the slots' time (anyio's in a node), set by hand here
        deliverer._slots = TenantSlots(now=lambda: now)
        world.attach(deliverer)  # 2 consumers: a tenant may have 1 attempt in flight
        cap = deliverer.max_in_flight_per_tenant
        for n, ran in enumerate(ran_s):  # attempts that ended before
            assert await deliverer._slots.take(tenant, f"ended{n}", cap)
            now += ran
            deliverer._slots.free(tenant, f"ended{n}")
        assert await deliverer._slots.take(tenant, "held", cap)
        now += busy_s
        await world.emit(tenant, 1)
        await clock.run_until_idle()
        assert world.metrics.get("webhooks_deferred_total") == 1 and receiver.hits == []
        deliverer._slots.free(tenant, "held")
        await clock.advance(deferred_ms - 1)
        assert receiver.hits == []
        await clock.advance(1)
    assert [(h.at_ms, h.headers["x-mailbox-actors-delivery-attempt"]) for h in receiver.hits] == [
        (T0 + deferred_ms, "1")]
    assert world.metrics.get("webhooks_retried_total") == 0
    assert world.metrics.get("webhooks_delivered_total") == 1


@pytest.mark.anyio
async def test_example_receiver_deduplicates_a_redelivered_event(
        world: World, clock: FakeClock, capsys: pytest.CaptureFixture[str]) -> None:
    """EV-3: the same event delivered twice (an outbox dispatch repeated after a crash) is accepted
    both times but handled once by the example receiver, which refuses bad or stale signatures."""
    receiver = Receiver(clock, seen=example.SeenEvents())
    async with serving(receiver) as port:
        tenant = await world.tenant(port)
        world.attach(world.deliverer())
        [event] = await world.emit(tenant, 7)
        await world.sink.publish("identity_mailbox", OBJECT_ID, [event])  # the repeat
        await clock.run_until_idle()
    assert receiver.answers == [200, 200]
    printed = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("event ")]
    assert printed == [f"event {event.id} identity.created sequence=7"]

    body = receiver.hits[0].body
    now = T0 // 1000
    fresh = {SIGNATURE_HEADER: sign(SECRET, now, body)}
    seen = example.SeenEvents()
    assert example.receive(SECRET, seen, {}, body, now_s=now) == 401
    assert example.receive("wrong-secret-0123456", seen, fresh, body, now_s=now) == 401
    assert example.receive(SECRET, seen, fresh, body + b" ", now_s=now) == 401
    assert example.receive(SECRET, seen, fresh, body, now_s=now + 301) == 401
    assert example.receive(SECRET, seen, fresh, body, now_s=now) == 200
    assert example.receive(SECRET, seen, fresh, body, now_s=now) == 200
    assert [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("event ")] == [
        f"event {event.id} identity.created sequence=7"]
    seen.close()
    receiver.seen.close()


@pytest.mark.anyio
async def test_no_tenant_no_webhook_and_foreign_events(world: World, clock: FakeClock) -> None:
    """Q-3, Q-4: an event whose tenant is unknown or has no webhook is acked and counted as skipped;
    a body that is not an event and an event naming another tenant are dead-lettered at once,
    saying why."""
    no_hook = await world.tenant(None)
    world.attach(world.deliverer())
    await world.emit("ten_unknown", 1)
    await world.emit(no_hook, 1)
    forged = msgspec.to_builtins(make_event(1, "ten_other"))
    await world.queues.send("webhooks", {"v": 1, "kind": "webhook_event", "tenant_id": no_hook,
                                         "namespace": "identity_mailbox", "object_id": OBJECT_ID,
                                         "event": forged})
    await world.queues.send("webhooks", {"v": 1, "kind": "webhook_event", "tenant_id": no_hook})
    await clock.run_until_idle()
    assert world.metrics.get("webhooks_skipped_total", (("reason", "no_tenant"),)) == 1
    assert world.metrics.get("webhooks_skipped_total", (("reason", "no_webhook"),)) == 1
    reasons = sorted(d["reason"] for d in await world.queues.dead_letters("webhooks"))
    assert len(reasons) == 2
    assert reasons[0].startswith("invalid body: Object missing required field")
    assert reasons[1] == "invalid body: the event belongs to another tenant"
    assert await world.queues.depth("webhooks") == 0


@pytest.mark.anyio
@pytest.mark.usefixtures("_reset_structlog")
async def test_logs_never_show_the_secret_url_or_event(world: World, clock: FakeClock) -> None:
    """Q-4: retries and the dead letter are logged with ids, tenant and outcome at warning and error
    level, never with the webhook secret, the endpoint's URL or the event's data."""
    out = io.StringIO()
    configure_logging(json=True, level="debug", stream=out)
    async with scripted(clock, [], then=503) as (_, port):
        tenant = await world.tenant(port, "/hooks/token-s3cr3t-path")
        world.attach(world.deliverer(schedule_s=(1,)))
        [event] = await world.emit(tenant, 1)
        await clock.advance(2_000)
    text = out.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    failed = [ln for ln in lines if ln["event"] == "webhook_attempt_failed"]
    dead = [ln for ln in lines if ln["event"] == "webhook_dead_lettered"]
    assert [(ln["level"], ln["outcome"], ln["attempt"]) for ln in failed] == [("warning", "http 503", 1)]
    assert [(ln["level"], ln["reason"], ln["tenant_id"], ln["event_id"]) for ln in dead] == [
        ("error", "http 503 after 2 attempts", tenant, event.id)]
    for leak in (SECRET, "token-s3cr3t-path", "127.0.0.1", '"n":'):
        assert leak not in text
    assert SECRET not in repr(await world.db.get_tenant(tenant))


@pytest.mark.anyio
async def test_waiters_for_a_tenant_slot_survive_the_last_holder_leaving() -> None:
    """Q-4: when the last attempt in flight for a tenant frees its slot, the deliveries that were
    waiting for it take slots cleanly (no lost ack, no duplicate delivery from a crash)."""
    deliverer = WebhookDeliverer(None, None, clock=FakeClock(), rng=SeededRng(1))  # type: ignore[arg-type]
    deliverer.max_in_flight_per_tenant = 1
    assert await deliverer._slots.take("t", "a", deliverer.max_in_flight_per_tenant)
    taken: list[str] = []

    async def wait_for_slot(key: str) -> None:
        assert await deliverer._slots.take("t", key, deliverer.max_in_flight_per_tenant)
        taken.append(key)
        await anyio.lowlevel.checkpoint()
        deliverer._slots.free("t", key)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_for_slot, "b")
        tg.start_soon(wait_for_slot, "c")
        await anyio.wait_all_tasks_blocked()
        deliverer._slots.free("t", "a")  # the last holder leaves: the tenant's entry is dropped
    assert sorted(taken) == ["b", "c"]
    assert deliverer._slots.tenants_in_flight == 0


@pytest.mark.anyio
async def test_concurrent_deliveries_share_one_tenant_read_and_see_changes_soon() -> None:
    """Q-3, Q-4: deliveries for one tenant re-read it from the control database, sharing one read
    when they run at once, and a change is seen within 100 ms of fake time."""
    clock = FakeClock()
    reads: list[str] = []
    release = anyio.Event()

    class Db:
        async def get_tenant(self, tenant_id: str) -> Any:
            reads.append(tenant_id)
            await release.wait()
            return f"{tenant_id}@{clock.now_ms()}"

    deliverer = WebhookDeliverer(Db(), None, clock=clock, rng=SeededRng(1))  # type: ignore[arg-type]
    got: list[Any] = []

    async def read() -> None:
        got.append(await deliverer._tenants.get("t"))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert reads == ["t"] and len(set(got)) == 1 and len(got) == 5
    await clock.advance(100)
    assert await deliverer._tenants.get("t") == got[0] and reads == ["t"]  # still fresh
    await clock.advance(1)
    assert await deliverer._tenants.get("t") != got[0] and reads == ["t", "t"]  # read again


@pytest.mark.anyio
async def test_a_failed_shared_tenant_read_is_not_taken_for_a_missing_tenant() -> None:
    """Q-3, Q-4: when the read that concurrent deliveries share fails, the others read the
    tenant themselves instead of treating it as absent (which would skip their events)."""
    clock = FakeClock()
    calls = 0
    release = anyio.Event()

    class Db:
        async def get_tenant(self, tenant_id: str) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                await release.wait()
                raise ConnectionError("control database busy")
            return "tenant-row"

    deliverer = WebhookDeliverer(Db(), None, clock=clock, rng=SeededRng(1))  # type: ignore[arg-type]
    results: list[Any] = []

    async def first() -> None:
        with pytest.raises(ConnectionError):
            await deliverer._tenants.get("t")

    async def second() -> None:
        results.append(await deliverer._tenants.get("t"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(second)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert results == ["tenant-row"] and calls == 2


@pytest.mark.anyio
async def test_deliveries_waiting_on_a_slow_tenant_read_use_its_result() -> None:
    """Q-4: deliveries that waited for another's tenant read use that result even when the read
    took longer than the freshness window, instead of reading again one after another."""
    clock = FakeClock()
    reads = 0
    release = anyio.Event()

    class Db:
        async def get_tenant(self, tenant_id: str) -> Any:
            nonlocal reads
            reads += 1
            await release.wait()
            return "row"

    deliverer = WebhookDeliverer(Db(), None, clock=clock, rng=SeededRng(1))  # type: ignore[arg-type]
    got: list[Any] = []

    async def read() -> None:
        got.append(await deliverer._tenants.get("t"))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        clock.set_ms(clock.now_ms() + 1_000)  # the read outlasts the 100 ms window
        release.set()
    assert got == ["row"] * 5 and reads == 1


@pytest.mark.anyio
async def test_a_failed_index_write_fails_the_publish_with_its_own_error(world: World) -> None:
    """EV-2: the event index and the queue are written side by side; when one fails, the outbox
    alarm's publish raises that error itself (retryable unavailable here), so it is retried and
    logged under its own name."""
    await world.db.close()
    with pytest.raises(MailboxActorsError) as info:
        await world.emit("ten_1", 1)
    assert info.value.code is ErrorCode.UNAVAILABLE and info.value.retryable
