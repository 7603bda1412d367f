"""The testing toolkit (TK-1..TK-4): the pytest plugin's fixtures, reaching into live actors from
a test, typed calls, quiet logs and a clear error for a runtime used before it started."""

from __future__ import annotations

import logging
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aiosmtplib
import anyio
import pytest

import actors_for_tests as afs
from actors_for_tests import TENANT, Scratch
from mailbox_actors.http.client import HttpPool
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.runtime.actor import Call
from mailbox_actors.testing import NotStarted, TestCluster, TestRuntime, WebhookReceiver
from mailbox_actors.testing.pytest_plugin import WEBHOOK_SECRET
from mailbox_actors.testing.smtp import SmtpSink
from mailbox_actors.webhooks.signature import SIGNATURE_HEADER, sign
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.quota import QuotaInit, QuotaStatus

pytestmark = pytest.mark.anyio


# ---- TK-1: fixtures ------------------------------------------------------------------------------


@pytest.mark.actor_runtime(objects=afs.ALL_OBJECTS, idle_ms=5_000)
async def test_actor_runtime_is_started_with_the_markers_options(
        actor_runtime: TestRuntime, tmp_path: Path) -> None:
    """TK-1: the actor_runtime fixture is a started TestRuntime in the test's own directory, made
    with the actor_runtime marker's options (objects, settings)."""
    assert actor_runtime.settings.idle_ms == 5_000
    assert actor_runtime.data_dir.is_relative_to(tmp_path)
    oid = await afs.new_scratch(actor_runtime, "a")
    await afs.scratch(actor_runtime, oid, afs.Put(k="x", v="1"))
    assert (await afs.scratch(actor_runtime, oid, afs.Dump()))["keys"] == ["x"]


async def test_actor_runtime_factory_starts_several_and_reopens_a_directory(
        actor_runtime_factory: Any) -> None:
    """TK-1: the factory starts as many runtimes as a test needs, each with its own storage; one
    made on another's directory sees its data (a restart); all stop at the end of the test."""
    one = await actor_runtime_factory(objects=afs.ALL_OBJECTS)
    two = await actor_runtime_factory(objects=afs.ALL_OBJECTS)
    assert one.data_dir != two.data_dir
    oid = await afs.new_scratch(one, "a")
    await afs.scratch(one, oid, afs.Put(k="kept", v="1"))
    with pytest.raises(MailboxActorsError) as e:
        await afs.scratch(two, oid, afs.Dump())
    assert e.value.code == "tenant_not_found"
    await one.stop()
    again = await actor_runtime_factory(objects=afs.ALL_OBJECTS, data_dir=one.data_dir)
    assert (await afs.scratch(again, oid, afs.Dump()))["keys"] == ["kept"]


@pytest.mark.slow
@pytest.mark.actor_cluster(nodes=2)
async def test_actor_cluster_kills_a_node_and_gets_it_back(actor_cluster: TestCluster) -> None:
    """TK-1: the actor_cluster fixture is a real cluster of node processes; kill(i) SIGKILLs one
    (a new pid comes back), and what was written before is there after."""
    async with actor_cluster.client(max_attempts=5) as client:
        qid = await client.id_from_name("tenant_quota", "acme")
        await client.call("tenant_quota", qid, QuotaInit(per_minute=5, per_day=50),
                          tenant_id="acme")
        old = [n["pid"] for n in actor_cluster.nodes()]
        for i in range(2):
            new_pid = await anyio.to_thread.run_sync(actor_cluster.restart, i)
            assert new_pid != old[i]
        status = await client.call("tenant_quota", qid, QuotaStatus(), tenant_id="acme")
        assert (status["per_minute"], status["per_day"]) == (5, 50)


async def test_smtp_sink_fixture_records_what_it_is_sent(smtp_sink: SmtpSink) -> None:
    """TK-1: the smtp_sink fixture is an SMTP server on 127.0.0.1 that records each message."""
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "a@example.com", "b@example.org", "hello"
    msg.set_content("body")
    await aiosmtplib.send(msg, hostname=smtp_sink.host, port=smtp_sink.port)
    assert len(smtp_sink.messages) == 1
    assert smtp_sink.messages[0].message["Subject"] == "hello"


async def test_webhook_receiver_fixture_verifies_signatures(
        actor_runtime: TestRuntime, webhook_receiver: WebhookReceiver) -> None:
    """TK-1: the webhook_receiver fixture verifies each delivery's signature with WEBHOOK_SECRET
    against the test runtime's clock: a good one is recorded as verified and answered 200, a forged
    or stale one is answered 401 and never counted as verified."""
    body = b'{"type":"identity.created"}'
    now_s = actor_runtime.now_ms() // 1000
    path = webhook_receiver.path
    async with HttpPool() as pool:
        url = webhook_receiver.url.removesuffix(path)
        good = {SIGNATURE_HEADER: sign(WEBHOOK_SECRET, now_s, body),
                "content-type": "application/json"}
        forged = {SIGNATURE_HEADER: sign("not-the-secret", now_s, body)}
        stale = {SIGNATURE_HEADER: sign(WEBHOOK_SECRET, now_s - 3_600, body)}
        statuses = [(await pool.request(url, "POST", path, h, body, timeout_s=10))[0]
                    for h in (good, forged, stale)]
    assert statuses == [200, 401, 401]
    assert [d.json for d in webhook_receiver.verified] == [{"type": "identity.created"}]
    assert len(webhook_receiver.deliveries) == 3


# ---- TK-2: inside actors -------------------------------------------------------------------------


@pytest.mark.actor_runtime(objects=afs.ALL_OBJECTS)
async def test_run_in_actor_runs_under_the_actors_gates(actor_runtime: TestRuntime) -> None:
    """TK-2: run_in_actor runs fn(instance, storage) in the live actor (runInDurableObject): it
    sees the instance and its storage, may be async, and no request of the actor runs while it
    does; what it writes is committed when it returns; what it raises reaches the test and the
    actor is not reset for it."""
    rt = actor_runtime
    oid = await afs.new_scratch(rt, "a")
    order: list[str] = []
    release = anyio.Event()

    async def inside(actor: Scratch, storage: Any) -> str:
        order.append("fn starts")
        storage.exec("INSERT INTO items (k, v) VALUES ('from-fn', '1')")
        actor.marker = "kept"  # type: ignore[attr-defined]
        await release.wait()
        order.append("fn ends")
        return type(actor).__name__

    async def request() -> None:
        await afs.scratch(rt, oid, afs.Put(k="request", v="1"))
        order.append("request done")

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _run_and_note(rt, oid, inside, order))
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(request)
        await anyio.wait_all_tasks_blocked()
        assert order == ["fn starts"]  # the request waits at the gate
        release.set()
    assert order == ["fn starts", "fn ends", "result Scratch", "request done"]
    assert (await afs.scratch(rt, oid, afs.Dump()))["keys"] == ["from-fn", "request"]

    def fails(actor: Scratch, storage: Any) -> None:
        raise LookupError("from the test's function")

    with pytest.raises(LookupError):
        await rt.run_in_actor("scratch", oid, fails)
    assert await rt.run_in_actor("scratch", oid, lambda a, s: a.marker) == "kept"


async def _run_and_note(rt: TestRuntime, oid: str, fn: Any, order: list[str]) -> None:
    order.append(f"result {await rt.run_in_actor('scratch', oid, fn)}")


@pytest.mark.actor_runtime(objects=afs.ALL_OBJECTS)
async def test_list_ids_and_alarms_from_outside(actor_runtime: TestRuntime) -> None:
    """TK-2: list_ids gives the ids of the objects that exist in a namespace
    (listDurableObjectIds); get_alarm and set_alarm read and set an actor's alarm from outside, and
    an alarm set so fires when its time comes."""
    rt = actor_runtime
    assert rt.list_ids("scratch") == []
    ids = sorted([await afs.new_scratch(rt, "a"), await afs.new_scratch(rt, "b")])
    assert rt.list_ids("scratch") == ids
    assert rt.list_ids("purposes") == []
    assert await rt.get_alarm("scratch", ids[0]) is None
    assert await rt.get_alarm("scratch", rt.id_from_name("scratch", "never")) is None
    at = rt.now_ms() + 30_000
    await rt.set_alarm("scratch", ids[0], at)
    assert await rt.get_alarm("scratch", ids[0]) == at
    await rt.advance(30_000)
    assert [(s.object_id, s.scheduled_ms) for s in afs.ALARM_LOG] == [(ids[0], at)]
    assert await rt.get_alarm("scratch", ids[0]) is None
    with pytest.raises(MailboxActorsError):
        rt.list_ids("no_such_namespace")


@pytest.mark.actor_runtime(objects=afs.ALL_OBJECTS)
async def test_fire_alarm_now_runs_the_handler_whatever_its_time(actor_runtime: TestRuntime) -> None:
    """TK-2: fire_alarm_now runs the alarm handler now even when the alarm is an hour away
    (runDurableObjectAlarm), says True; for an actor without an alarm it runs nothing and says
    False."""
    rt = actor_runtime
    oid = await afs.new_scratch(rt, "a", alarm_at=rt.now_ms() + 3_600_000)
    assert await rt.fire_alarm_now("scratch", oid) is True
    assert [(s.object_id, s.now_ms) for s in afs.ALARM_LOG] == [(oid, rt.now_ms())]
    assert await rt.fire_alarm_now("scratch", oid) is False
    assert len(afs.ALARM_LOG) == 1


@pytest.mark.actor_runtime(objects=afs.ALL_OBJECTS, raise_errors=True)
async def test_raise_errors_shows_the_handlers_exception(actor_runtime: TestRuntime) -> None:
    """TK-2: with raise_errors, a handler's exception reaches the test as itself, with the
    handler's frame in its traceback, instead of internal_error; errors meant for the caller
    (MailboxActorsError) are answered as usual; an alarm handler's exception is raised by
    fire_alarm_now."""
    rt = actor_runtime
    oid = await afs.new_scratch(rt, "a")

    async def broken(actor: Scratch, call: Call, arg: Any) -> Any:
        return {"x": 1}["missing"]

    with pytest.raises(KeyError) as e:
        await afs.run(rt, oid, broken)
    assert any(frame.name == "broken" for frame in e.traceback)
    with pytest.raises(MailboxActorsError) as refused:
        await rt.call("scratch", oid, afs.Dump(), tenant_id="other_tenant")
    assert refused.value.code == "internal_error"  # an owner mismatch is an answer, not a bug

    async def alarm_fails(actor: Scratch, info: Any) -> None:
        raise ZeroDivisionError("in the alarm")

    afs.ALARM_HOOKS[oid] = alarm_fails
    await afs.scratch(rt, oid, afs.SetAlarm(at_ms=rt.now_ms()))
    with pytest.raises(ZeroDivisionError):
        await rt.fire_alarm_now("scratch", oid)


async def test_without_raise_errors_the_caller_gets_internal_error(tmp_path: Path) -> None:
    """TK-2: without the option, the test sees what a caller sees: internal_error."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def broken(actor: Scratch, call: Call, arg: Any) -> Any:
            raise KeyError("x")

        with pytest.raises(MailboxActorsError) as e:
            await afs.run(rt, oid, broken)
        assert e.value.code == "internal_error"


# ---- TK-3: typed calls ---------------------------------------------------------------------------


async def test_call_takes_a_struct_or_a_dict_and_decodes_replies_when_asked(
        actor_runtime: TestRuntime) -> None:
    """TK-3: call takes a request Struct or the same request as a dict; reply_type=True decodes
    the reply into the namespace's reply Struct for the op."""
    rt = actor_runtime
    qid = rt.id_from_name("tenant_quota", "acme")
    assert await rt.call("tenant_quota", qid, {"op": "init", "per_minute": 3, "per_day": 9},
                         tenant_id="acme") == {"created": True}
    plain = await rt.call("tenant_quota", qid, QuotaStatus(), tenant_id="acme")
    typed = await rt.call("tenant_quota", qid, QuotaStatus(), tenant_id="acme", reply_type=True)
    assert isinstance(plain, dict) and plain["per_minute"] == 3
    assert typed.per_minute == 3 and type(typed).__name__ != "dict"


# ---- TK-4: quiet, and a clear error before start ------------------------------------------------


async def test_runtime_logs_go_to_pytests_log_capture_not_stdout(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    """TK-4: a test's runtime log lines (node_started and the rest) are records of the
    mailbox_actors logger in pytest's log capture; nothing of them reaches stdout or stderr."""
    caplog.set_level(logging.INFO, logger="mailbox_actors")
    async with TestRuntime(tmp_path) as rt:
        await rt.call("tenant_quota", rt.id_from_name("tenant_quota", "t"),
                      QuotaInit(per_minute=1, per_day=1), tenant_id=TENANT)
    out, err = capfd.readouterr()
    assert "node_started" not in out and "node_started" not in err
    assert any("node_started" in r.getMessage() for r in caplog.records
               if r.name == "mailbox_actors")


async def test_a_runtime_used_before_it_started_is_a_clear_error(tmp_path: Path) -> None:
    """TK-4: calling a TestRuntime that was never started (or after it stopped) raises
    NotStarted saying how to start it, not an obscure failure deep inside."""
    rt = TestRuntime(tmp_path)
    for attempt in (lambda: rt.call("tenant_quota", "x", QuotaStatus()), lambda: rt.advance(1),
                    lambda: rt.fire_alarm_now("tenant_quota", "x"),
                    lambda: rt.run_in_actor("tenant_quota", "x", lambda a, s: None)):
        with pytest.raises(NotStarted) as e:
            await attempt()
        assert "async with TestRuntime" in str(e.value)
    async with rt:
        pass
    with pytest.raises(NotStarted):
        rt.list_ids("tenant_quota")


@pytest.mark.actor_runtime(control=True)
async def test_webhook_receiver_gets_the_runtimes_signed_deliveries(
        actor_runtime: TestRuntime, webhook_receiver: WebhookReceiver) -> None:
    """TK-1: the webhook_receiver fixture is what a tenant's webhook URL can point at: the
    runtime's own webhook consumers deliver identity.created to it, signed with the tenant's secret,
    and it verifies the signature on the runtime's clock."""
    rt = actor_runtime
    db = rt.node.control_db
    assert db is not None
    tenant = await db.create_tenant("acme", webhook_url=webhook_receiver.url,
                                    webhook_secret=WEBHOOK_SECRET)
    await create_identity(db, rt.node, tenant.id, "alice")
    await rt.run_until_idle()
    with anyio.fail_after(30):  # the tenant's quota, initialised by create_identity, and alice
        delivered = await webhook_receiver.wait_for(2)
    assert sorted(d.event_type for d in delivered) == ["identity.created", "quota.created"]
    assert all(d.json["tenant_id"] == tenant.id and d.status == 200 for d in delivered)


@pytest.mark.actor_runtime(objects=afs.ALL_OBJECTS)
async def test_fire_alarm_now_runs_purposes_not_yet_due(actor_runtime: TestRuntime) -> None:
    """TK-2: fire_alarm_now on an actor whose alarm multiplexes purposes runs the purpose the
    alarm was set for, an hour before its time."""
    rt = actor_runtime
    pid = rt.id_from_name("purposes", "p")
    await rt.call("purposes", pid, afs.PInit(), tenant_id=TENANT)
    await rt.call("purposes", pid, afs.Schedule(purpose="check", at_ms=rt.now_ms() + 3_600_000),
                  tenant_id=TENANT)
    assert await rt.fire_alarm_now("purposes", pid) is True
    assert [(oid, purpose) for oid, purpose, _ in afs.PURPOSE_LOG] == [(pid, "check")]
    assert (await rt.call("purposes", pid, afs.PState(), tenant_id=TENANT))["scheduled"] == {}
