"""The transactional outbox: events written with the state change, dispatched by the outbox alarm,
replayable in order, never lost across SIGKILL (EV-1..EV-5, AL-6)."""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest

import actors_for_tests as afs
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.outbox import EventSink
from mailbox_actors.testing import TestRuntime
from mailbox_actors.webhooks.publish import ControlEventSink
from mailbox_actors.wire.control import EventIndexRow, Identity, Tenant
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.events import EmitEvent, Event, GetEvents
from mailbox_actors.wire.mailbox import MailboxErase, MailboxInit, MailboxStatus
from mailbox_actors.wire.quota import QuotaInit

HERE = Path(__file__).resolve().parents[1] / "support"
IDS = {"tenant_id": "t1", "identity_id": "i1"}


@pytest.mark.anyio
async def test_state_change_and_its_event_commit_together(tmp_path: Path) -> None:
    """EV-1: init writes identity.created to the outbox in its own transaction, with sequence 1,
    undispatched, and arms alarm:outbox for now."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        status = await rt.call("identity_mailbox", m, MailboxStatus(), **IDS)
        assert status["alarm"] == rt.now_ms()  # the outbox is due now
        assert rt.events.published == []  # not yet dispatched
        got = await rt.call("identity_mailbox", m, GetEvents(), **IDS)
        [event] = got["events"]
        assert (event["type"], event["sequence"], event["tenant_id"], event["identity_id"]) == (
            "identity.created", 1, "t1", "i1")
        assert event["id"].startswith("evt_")


@pytest.mark.anyio
async def test_outbox_alarm_dispatches_then_re_arms_to_maintenance(tmp_path: Path) -> None:
    """EV-2, AL-2: the outbox alarm publishes every undispatched event once, in order, then the
    alarm falls back to the daily maintenance purpose."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        for i in range(3):
            await rt.call("identity_mailbox", m, EmitEvent(type="identity.updated",
                                                           data={"n": i}), **IDS)
        await rt.run_until_idle()
        types = [(e.type, e.sequence) for e in rt.events.events()]
        assert types == [("identity.created", 1), ("identity.updated", 2),
                         ("identity.updated", 3), ("identity.updated", 4)]
        await rt.run_until_idle()
        assert len(rt.events.published) == 4  # dispatched once
        status = await rt.call("identity_mailbox", m, MailboxStatus(), **IDS)
        assert status["alarm"] == rt.now_ms() + 86_400_000


class _Undo(Exception):
    pass


def _emits(actor: Any, storage: Any, ns: list[int], fail_after: bool) -> None:
    def run(tx: Any) -> None:
        for n in ns:
            actor.ctx.emit(tx, "identity.updated", {"n": n})
        if fail_after:
            raise _Undo
    try:
        storage.transaction_sync(run)
    except _Undo:
        pass


@pytest.mark.anyio
async def test_each_run_publishes_what_the_outbox_holds_once_and_in_order(tmp_path: Path) -> None:
    """EV-2, EV-4: the outbox run publishes exactly the stored undispatched events, in sequence
    order, each once: across runs, after rolled-back emits (whose events never existed), and
    past the number of events a run keeps in memory (it then reads them back)."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        await rt.run_until_idle()
        plan = [([1, 2], False), ([3], False), ([4, 5], False), ([6], False), ([-1], True),
                ([7], False), ([8], False), (list(range(9, 310)), False), ([-2, -3], True),
                ([310], False), ([311], False)]
        for ns, fail in plan:
            await rt.run_in_actor("identity_mailbox", m,
                                  lambda a, s, ns=ns, fail=fail: _emits(a, s, ns, fail))
            if len(ns) < 3:
                await rt.run_until_idle()  # a run between these writes
        await rt.run_until_idle()
        published = [(e.sequence, e.data.get("n")) for e in rt.events.events("identity.updated")]
        stored = await rt.call("identity_mailbox", m, GetEvents(limit=1000), **IDS)
        replay = [(e["sequence"], e["data"].get("n")) for e in stored["events"]
                  if e["type"] == "identity.updated"]
    assert published == replay == [(k + 1, k) for k in range(1, 312)]


@pytest.mark.anyio
async def test_an_event_emitted_while_the_run_publishes_goes_out_with_the_next_run(
        tmp_path: Path) -> None:
    """EV-1, EV-2, AL-2: an event a request emits while the outbox run is publishing keeps the
    actor's alarm due (the run re-arms it from the recorded purposes), and the next run
    publishes it; then the alarm falls back to the daily maintenance."""
    started, release = anyio.Event(), anyio.Event()

    class Held:
        def __init__(self, inner: EventSink) -> None:
            self.inner = inner

        async def publish(self, ns: str, oid: str, events: Sequence[Event]) -> None:
            if not release.is_set():
                started.set()
                await release.wait()
            await self.inner.publish(ns, oid, events)

    async with TestRuntime(tmp_path, wrap_event_sink=Held) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        due = rt.now_ms()
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run_until_idle)  # the outbox run: held in publish
            await started.wait()
            await rt.call("identity_mailbox", m, EmitEvent(type="identity.updated",
                                                           data={"n": 1}), **IDS)
            assert await rt.get_alarm("identity_mailbox", m) == due  # still due, as stored
            release.set()
        await rt.run_until_idle()
        assert [(e.type, e.sequence) for e in rt.events.events()] == [
            ("identity.created", 1), ("identity.updated", 2)]
        status = await rt.call("identity_mailbox", m, MailboxStatus(), **IDS)
        assert status["alarm"] == rt.now_ms() + 86_400_000


def _undispatched_in_file(path: Path) -> list[int]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return [r[0] for r in conn.execute(
            "SELECT sequence FROM outbox WHERE dispatched_at IS NULL ORDER BY sequence")]


@pytest.mark.anyio
async def test_events_appended_while_the_run_publishes_go_out_in_that_run_marked_once(
        tmp_path: Path) -> None:
    """EV-2, EV-3: events requests append while the outbox run publishes are published by the
    same run, before its closing commit, which marks them all: each event is published once,
    and none is marked before it was published."""
    started, release = anyio.Event(), anyio.Event()
    seen: list[tuple[list[int], list[int]]] = []  # (sequences published, undispatched in file)
    path: list[Path] = []

    class Held:
        def __init__(self, inner: EventSink) -> None:
            self.inner = inner

        async def publish(self, ns: str, oid: str, events: Sequence[Event]) -> None:
            seen.append(([e.sequence for e in events], _undispatched_in_file(path[0])))
            if not release.is_set():
                started.set()
                await release.wait()
            await self.inner.publish(ns, oid, events)

    async with TestRuntime(tmp_path, wrap_event_sink=Held) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        path.append(Path(rt.node.host.path_for("identity_mailbox", m)))
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run_until_idle)  # the outbox run: held in its first publish
            await started.wait()
            for n in range(2):
                await rt.call("identity_mailbox", m, EmitEvent(type="identity.updated",
                                                               data={"n": n}), **IDS)
            release.set()
        await rt.run_until_idle()
        assert seen == [([1], [1]), ([2, 3], [1, 2, 3])]  # 1 still unmarked: no commit between
        assert [e.sequence for e in rt.events.events()] == [1, 2, 3]
        assert _undispatched_in_file(path[0]) == []
        status = await rt.call("identity_mailbox", m, MailboxStatus(), **IDS)
        assert status["alarm"] == rt.now_ms() + 86_400_000


async def _scratch_with_a_marked_event(rt: TestRuntime, handler: Any) -> tuple[str, Any]:
    """A scratch actor whose alarm ``handler`` runs the purposes (the outbox), with one event
    published and marked: the connection then answers the outbox's reads from memory."""
    oid = await afs.new_scratch(rt, "a")
    afs.ALARM_HOOKS[oid] = handler

    async def emit_one(actor: Any, _call: Any, arg: Any) -> Any:
        return actor.sql.transaction_sync(
            lambda tx: actor.ctx.emit(tx, "scratch.x", {"n": arg})).sequence

    await afs.run(rt, oid, emit_one, 0)
    await rt.run_until_idle()
    return oid, emit_one


def _doomed(tx_in: anyio.Event, tx_go: anyio.Event) -> Any:
    async def doomed(actor: Any, _call: Any, _arg: Any) -> Any:
        return await afs.doomed_transaction(
            actor, lambda tx: actor.ctx.emit(tx, "scratch.doomed", {"n": 99}), tx_in, tx_go)
    return doomed


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["first_read", "catch_up"])
async def test_a_run_never_publishes_an_event_of_an_open_transaction(tmp_path: Path,
                                                                     where: str) -> None:
    """EV-1, EV-2, RT-16 (review s23 R4, R10, R11): while another request's ctx.transaction is
    open with an event it appended, an outbox run whose first read comes then (its handler
    awaited before the purposes) or whose publish returns then (its catch-up) publishes only
    committed events; the transaction rolls back, and its event is never published, nor its
    sequence given twice. The connection answers from memory (an event marked first)."""
    hold_run, run_held = anyio.Event(), anyio.Event()
    hold_publish, publish_held = anyio.Event(), anyio.Event()
    tx_in, tx_go = anyio.Event(), anyio.Event()
    published: list[tuple[int, str]] = []

    class Held:
        def __init__(self, inner: EventSink) -> None:
            self.inner = inner

        async def publish(self, ns: str, oid: str, events: Sequence[Event]) -> None:
            published.extend((e.sequence, e.type) for e in events)
            if where == "catch_up" and not hold_publish.is_set():
                publish_held.set()
                await hold_publish.wait()
            await self.inner.publish(ns, oid, events)

    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS, wrap_event_sink=Held) as rt:
        async def await_then_purposes(actor: Any, info: Any) -> None:
            if where == "first_read" and not hold_run.is_set():
                run_held.set()
                await hold_run.wait()
            await Actor.alarm(actor, info)

        hold_run.set()
        hold_publish.set()
        oid, emit_one = await _scratch_with_a_marked_event(rt, await_then_purposes)
        assert [s for s, _ in published] == [1]  # published and marked
        hold_run, hold_publish = anyio.Event(), anyio.Event()
        published.clear()
        await afs.run(rt, oid, emit_one, 1)  # sequence 2: the outbox due now
        result: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run_until_idle)
            with anyio.fail_after(10):  # a bound on a hang, not a timing
                await (run_held if where == "first_read" else publish_held).wait()

            async def request() -> None:
                result.append(await afs.run(rt, oid, _doomed(tx_in, tx_go)))
            tg.start_soon(request)
            with anyio.fail_after(10):
                await tx_in.wait()  # sequence 3 appended, not committed
            hold_run.set()
            hold_publish.set()
            for _ in range(50):  # the run goes on while the transaction is open
                await anyio.lowlevel.checkpoint()
            tx_go.set()
        await rt.run_until_idle()
        await rt.advance(120_000)  # past a refused run's retry
        await rt.run_until_idle()
        last = await afs.run(rt, oid, emit_one, 3)
        await rt.run_until_idle()
        assert result == ["rolled back"]
        assert ("scratch.doomed" not in {t for _, t in published}
                and "scratch.doomed" not in {e.type for e in rt.events.events()})
        assert last == 3  # the rolled-back event's sequence, given once
        assert sorted({(e.sequence, e.type) for e in rt.events.events()}) == [
            (1, "scratch.x"), (2, "scratch.x"), (3, "scratch.x")]


@pytest.mark.anyio
async def test_a_failing_sink_retries_the_dispatch_and_loses_nothing(tmp_path: Path) -> None:
    """EV-3: when publishing fails the outbox alarm is retried with backoff; the event goes out
    on a later try, once it succeeds."""
    failures = [2]

    class Flaky:
        def __init__(self, inner: EventSink) -> None:
            self.inner = inner

        async def publish(self, ns: str, oid: str, events: Sequence[Event]) -> None:
            if failures[0]:
                failures[0] -= 1
                raise ConnectionError("control database unavailable")
            await self.inner.publish(ns, oid, events)

    async with TestRuntime(tmp_path, wrap_event_sink=Flaky) as rt:
        real = rt.events
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        await rt.run_until_idle()
        assert real.published == []
        await rt.advance(2_500)  # first retry after 2 s (+ jitter): fails again
        await rt.advance(10_000)  # second retry after 4 s: succeeds
        assert [e.type for e in real.events()] == ["identity.created"]


@pytest.mark.anyio
async def test_while_the_sink_fails_an_open_actor_keeps_no_event_bodies(tmp_path: Path) -> None:
    """EV-3, RT-9: while publishing fails, an actor kept open by its outbox's retries keeps none
    of the event bodies emitted meanwhile in memory (the retries read them from its file), and
    every one of them still goes out, in order, once the sink is back."""
    down = [False]

    class Down:
        def __init__(self, inner: EventSink) -> None:
            self.inner = inner

        async def publish(self, ns: str, oid: str, events: Sequence[Event]) -> None:
            if down[0]:
                raise ConnectionError("control database unavailable")
            await self.inner.publish(ns, oid, events)

    async with TestRuntime(tmp_path, wrap_event_sink=Down) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        await rt.run_until_idle()  # identity.created goes out: nothing is undispatched
        down[0] = True
        for i in range(40):
            await rt.call("identity_mailbox", m, EmitEvent(type="identity.updated",
                                                           data={"n": i}), **IDS)
            await rt.advance(1_000)
        kept = await rt.run_in_actor("identity_mailbox", m,
                                     lambda _actor, storage: storage._known_now().unsent)
        assert not kept
        down[0] = False
        await rt.advance(600_000)
        assert [e.type for e in rt.events.events()] == ["identity.created"] + \
            ["identity.updated"] * 40
        assert [e.data["n"] for e in rt.events.events()[1:]] == list(range(40))


@pytest.mark.anyio
async def test_get_events_replays_in_order_after_restart(tmp_path: Path) -> None:
    """EV-4: get_events returns events after a sequence, in order, paged, also after a
    restart."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        for i in range(5):
            await rt.call("identity_mailbox", m, EmitEvent(type="identity.updated",
                                                           data={"n": i}), **IDS)
    async with TestRuntime(tmp_path) as rt:
        page = await rt.call("identity_mailbox", m, GetEvents(after_sequence=2, limit=2), **IDS)
        assert [e["sequence"] for e in page["events"]] == [3, 4]
        assert page["next_after_sequence"] == 4
        page = await rt.call("identity_mailbox", m, GetEvents(after_sequence=4, limit=10), **IDS)
        assert [e["sequence"] for e in page["events"]] == [5, 6]
        assert page["next_after_sequence"] is None
        await rt.run_until_idle()  # the undispatched ones go out after the restart
        assert [e.sequence for e in rt.events.events()] == [1, 2, 3, 4, 5, 6]


@pytest.mark.anyio
async def test_event_data_never_carries_content_or_addresses(tmp_path: Path) -> None:
    """EV-5: emit_event refuses bodies, subjects and addresses in event data."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        for data in ({"subject": "hello"}, {"who": "alice@example.com"}, {"body": "x"}):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call("identity_mailbox", m, EmitEvent(type="identity.updated",
                                                               data=data), **IDS)
            assert e.value.code == "invalid_request"
        with pytest.raises(MailboxActorsError) as e:
            await rt.call("identity_mailbox", m, EmitEvent(type="quota.created"), **IDS)
        assert e.value.code == "invalid_request"


@pytest.mark.anyio
async def test_objects_emit_their_own_events(tmp_path: Path) -> None:
    """EV-1: TenantQuota and IdentityMailbox emit through the same outbox (quota.created,
    quota.limits_changed, identity.erased)."""
    async with TestRuntime(tmp_path) as rt:
        q = rt.id_from_name("tenant_quota", "t1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=1, per_day=2), tenant_id="t1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=1, per_day=2), tenant_id="t1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=5, per_day=9), tenant_id="t1")
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        await rt.call("identity_mailbox", m, MailboxErase(), **IDS)
        await rt.run_until_idle()
        assert [e.type for e in rt.events.events()] == [
            "quota.created", "quota.limits_changed", "identity.created", "identity.erased"]


@pytest.mark.anyio
async def test_maintenance_prunes_old_events_and_refreshes_size(tmp_path: Path) -> None:
    """AL-6: the daily maintenance deletes dispatched outbox rows past events_days and refreshes
    meta.size_bytes, then re-arms for the next day."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.id_from_name("identity_mailbox", "a")
        await rt.call("identity_mailbox", m, MailboxInit(), **IDS)
        await rt.run_until_idle()
        await rt.advance(31 * 86_400_000)  # 31 daily runs; the default events_days is 30
        page = await rt.call("identity_mailbox", m, GetEvents(), **IDS)
        assert page["events"] == []
        path = rt.node.host.path_for("identity_mailbox", m)
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        size = conn.execute("SELECT v FROM meta WHERE k = 'size_bytes'").fetchone()
        assert size is not None and int(size[0]) > 0
    finally:
        conn.close()


@pytest.mark.anyio
async def test_tenant_quota_maintenance_prunes_its_old_events_too(tmp_path: Path) -> None:
    """EV-4: TenantQuota's daily maintenance also deletes its dispatched events past events_days
    (not only IdentityMailbox's), and keeps the rest."""
    async with TestRuntime(tmp_path) as rt:
        q = rt.id_from_name("tenant_quota", "t1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=5, per_day=50), tenant_id="t1")
        await rt.run_until_idle()
        await rt.advance(29 * 86_400_000)
        await rt.call("tenant_quota", q, QuotaInit(per_minute=6, per_day=50), tenant_id="t1")
        await rt.run_until_idle()
        await rt.advance(2 * 86_400_000)  # quota.created is now 31 days old
        path = rt.node.host.path_for("tenant_quota", q)
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        types = [r[0] for r in conn.execute("SELECT type FROM outbox ORDER BY sequence")]
    finally:
        conn.close()
    assert types == ["quota.limits_changed"]


def _start(data: Path, mode: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(HERE / "_outbox_proc.py"), str(data), mode],
                            stdout=subprocess.PIPE)


_UNREAD: dict[int, bytes] = {}  # by pid: what a read took past the line it returned


def _read_line(proc: subprocess.Popen[bytes], prefix: str, timeout_s: float = 60) -> str:
    """The child's next line starting with ``prefix``. Reads the pipe's descriptor itself and
    keeps what it read past that line: a buffered ``readline`` after ``select`` can take two
    lines written together into its buffer and then wait on an empty pipe for the second."""
    assert proc.stdout is not None
    fd, buf = proc.stdout.fileno(), _UNREAD.pop(proc.pid, b"")
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.startswith(prefix.encode()):
                _UNREAD[proc.pid] = buf
                return line.decode().strip()
        ready, _, _ = select.select([fd], [], [], timeout_s)
        assert ready, f"no {prefix!r} line within {timeout_s}s"
        chunk = os.read(fd, 65536)
        assert chunk, f"process ended before printing {prefix!r}"
        buf += chunk


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _UNREAD.pop(proc.pid, None)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["committed", "published", "caught_up"])
async def test_sigkill_between_outbox_steps_loses_no_event(tmp_path: Path, mode: str) -> None:
    """EV-3, REL-1: a node killed with SIGKILL after the outbox commit (before dispatch), after
    dispatch (before dispatched_at), or after a run published an event committed during its
    publish as well (before its closing commit marked either) delivers every event after
    restart: maybe twice, never not at all, and deduplicating by id leaves each once."""
    data = tmp_path / "node"
    proc = _start(data, mode)
    try:
        _, mid, tenant = _read_line(proc, "committed").split()
        if mode == "caught_up":
            _read_line(proc, "committed-second")
        if mode in ("published", "caught_up"):
            published = _read_line(proc, "published")
    finally:
        _kill(proc)
    types = ["identity.created", "identity.updated"] if mode == "caught_up" \
        else ["identity.created"]
    received: list[str] = []

    async def receiver(method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> tuple[int, bytes, str]:
        received.append(msgspec.json.decode(body)["id"])
        return 200, b"{}", "application/json"

    server = RpcHttpServer(receiver)
    port = await server.start("127.0.0.1", 0)
    try:
        async with TestRuntime(data, control=True) as rt:
            # As the kill left it: every event undispatched, so each is published again.
            left = _undispatched_in_file(Path(rt.node.host.path_for("identity_mailbox", mid)))
            assert left == list(range(1, len(types) + 1))
            db = rt.node.control_db
            assert db is not None
            await db.set_webhook(tenant, f"http://127.0.0.1:{port}/hook", "s" * 32)
            await rt.run_until_idle()
            indexed = await db.events(tenant)
            assert [r.type for r in indexed] == types  # INSERT OR IGNORE: once each
            page = await rt.call("identity_mailbox", mid, GetEvents(), tenant_id=tenant,
                                 identity_id="idt_crash")
            assert [e["type"] for e in page["events"]] == types
            event_ids = [e["id"] for e in page["events"]]
    finally:
        await server.stop()
    assert received, "the event never reached the webhook receiver"
    assert set(received) == set(event_ids)  # maybe twice, never not at all; dedupe leaves one
    if mode == "committed":
        assert len(received) == 1
    if mode == "caught_up":  # the second event went out before the kill, unmarked
        assert published.split()[1] == event_ids[1]


class SlowControlPlane:
    """Stands in for the control database and the queues: each write takes a fixed number of
    scheduler turns, and the shared log records it when it is done."""

    TURNS = 4

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    async def index_events(self, rows: list[EventIndexRow]) -> None:
        for _ in range(self.TURNS):
            await anyio.lowlevel.checkpoint()
        self.log.append(("indexed", [r.event_id for r in rows]))

    async def send_batch(self, queue: str, bodies: list[dict[str, Any]]) -> None:
        for _ in range(self.TURNS):
            await anyio.lowlevel.checkpoint()
        self.log.append(("sent", [b["event"]["id"] for b in bodies]))

    # Two separate stores (the SQLite files' way): the sink writes the index, then the queue.
    store = None

    def shares_transactions_with(self, store: object) -> bool:
        return False


@pytest.mark.anyio
async def test_every_event_is_indexed_before_it_is_queued() -> None:
    """EV-2: the outbox writes an event's index row, then its queue message: a receiver is never
    sent an event the index does not have yet, even when the index is the slower write."""

    class SlowIndex(SlowControlPlane):
        async def index_events(self, rows: list[EventIndexRow]) -> None:
            for _ in range(3 * self.TURNS):
                await anyio.lowlevel.checkpoint()
            await super().index_events(rows)

    plane = SlowIndex()
    sink = ControlEventSink(plane, plane)  # type: ignore[arg-type]

    async def publish(i: int) -> None:
        event = Event(id=f"evt_{i}", type="x", sequence=i, tenant_id="t", occurred_at_ms=0)
        await sink.publish("scratch", f"actor-{i}", [event])

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(publish, i)
            await anyio.lowlevel.checkpoint()
    first: dict[tuple[str, str], int] = {}
    for at, (kind, ids) in enumerate(plane.log):
        for event_id in ids:
            first.setdefault((kind, event_id), at)
    for i in range(20):
        assert first[("indexed", f"evt_{i}")] < first[("sent", f"evt_{i}")]


@pytest.mark.anyio
async def test_first_publisher_returns_once_its_own_group_is_written() -> None:
    """EV-2: under a steady stream of publishers, the event sink's first publisher returns as soon
    as its own group is written, not after the whole stream; no publisher returns earlier."""
    plane = SlowControlPlane()
    sink = ControlEventSink(plane, plane)  # type: ignore[arg-type]
    log = plane.log
    n = 100

    async def publish(i: int) -> None:
        event = Event(id=f"evt_{i}", type="x", sequence=i, tenant_id="t", occurred_at_ms=0)
        await sink.publish("scratch", f"actor-{i}", [event])
        log.append(("returned", i))

    async with anyio.create_task_group() as tg:
        for i in range(n):  # a new publisher at every turn of the loop
            tg.start_soon(publish, i)
            await anyio.lowlevel.checkpoint()

    first = log.index(("returned", 0))
    writes_before = [entry for entry in log[:first] if entry[0] == "sent"]
    writes_after = [entry for entry in log[first:] if entry[0] == "sent"]
    assert writes_before == [("sent", ["evt_0"])]
    assert len(writes_after) >= 3  # the stream went on for several more groups
    sent = list(itertools.chain.from_iterable(ids for kind, ids in log if kind == "sent"))
    assert sorted(sent) == sorted(f"evt_{i}" for i in range(n))
    for i in range(n):
        returned = log.index(("returned", i))
        assert any(f"evt_{i}" in ids for kind, ids in log[:returned] if kind == "sent")


DAY = 86_400_000


async def alice(rt: TestRuntime) -> tuple[ControlDb, Tenant, Identity]:
    """The control database, a tenant and its identity "alice", her identity.created delivered."""
    db = rt.node.control_db
    assert db is not None
    tenant = await db.create_tenant("acme")
    ident = await create_identity(db, rt.node, tenant.id, "alice")
    await rt.run_until_idle()
    return db, tenant, ident


def _emit(type_: str) -> object:
    from mailbox_actors.wire.events import EmitEvent
    return EmitEvent(type=type_)


@pytest.mark.anyio
async def test_an_event_is_delivered_after_an_outage_longer_than_the_alarm_retries(
        tmp_path: Path) -> None:
    """EV-3: the control database is away for five minutes (the outbox alarm's retries give up
    after about two); once it is back, the event is indexed all the same: never lost."""
    async with TestRuntime(tmp_path, control=True) as rt:
        db, tenant, ident = await alice(rt)
        await db.close()
        await rt.call("identity_mailbox", ident.mailbox_id, _emit("identity.updated"),
                      tenant_id=tenant.id, identity_id=ident.id)
        await rt.advance(300_000)
        await db.open()
        await rt.advance(120_000)
        assert [r.type for r in await db.events(tenant.id)] == [
            "quota.created", "identity.created", "identity.updated"]
