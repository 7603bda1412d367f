"""A served node answers first (issue 28 items 3 and 4: ``serve`` to its first answer, restarts
that do not grow with the data; Q-3, AL-4): ``serve`` reads its alarm index's rows, and makes and
opens its control database and queues, once the node answered; whatever needs the control
database meanwhile waits for it, never fails (events published, the status page's queue depths),
and alarms due meanwhile fire late, never not at all. A damaged control file still stops ``serve``
with status 2 (tests/ops/test_damaged_files.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import actors_for_tests as afs
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.node import Node
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.classes import DeferredActor
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.events import Event

pytestmark = pytest.mark.anyio


def _settings(tmp_path: Path) -> RuntimeSettings:
    return RuntimeSettings(data_dir=str(tmp_path / "data"),
                           control_db=str(tmp_path / "data" / "control.sqlite"),
                           queues_db=str(tmp_path / "data" / "queues.sqlite"))


def _node(tmp_path: Path) -> Node:
    return Node(_settings(tmp_path), objects=afs.ALL_OBJECTS, answer_first=True)


def _deferred(cls: type[Actor]) -> DeferredActor:
    return DeferredActor(cls.namespace, lambda: cls)


def _served_node(tmp_path: Path) -> Node:
    """As ``serve`` makes it: every object deferred, so its actor side is made after the first
    answer (tests/node/test_serve_imports.py checks what that leaves unimported)."""
    return Node(_settings(tmp_path), objects=[_deferred(c) for c in afs.ALL_OBJECTS],
                answer_first=True)


async def test_the_node_answers_before_its_control_database_is_made(tmp_path: Path) -> None:
    """Issue 28 item 3: once ``start()`` returned the node serves calls with its control
    database and queues not even made; the status page, which shows the queues, waits for them
    and shows them; their consumers then run like every loop."""
    node = _node(tmp_path)
    async with node:
        assert (node.control_db, node.queues, node.consumers) == (None, None, [])
        oid = await afs.new_scratch(node, "first")
        assert await afs.scratch(node, oid, afs.Put(k="a", v="1")) == {"k": "a"}
        app = NodeApp(node, cluster_token="c" * 32, operator_token="o" * 32)
        status = await app.status()
        assert "webhooks" in status["queues"]
        assert node.control_db is not None and node.queues is not None
        assert [c.queue for c in node.consumers][:1] == ["webhooks"]
    assert not node.failed.is_set()


async def test_events_published_before_the_open_wait_for_it(tmp_path: Path) -> None:
    """EV-2, Q-3: an event published before the control database is open is not lost nor
    refused: its publication waits for the open and the event is then in the index."""
    node = _node(tmp_path)
    async with node:
        assert node.control_db is None
        event = Event(id="evt_01JEARLY0000000000000000000", type="scratch.early", sequence=1,
                      tenant_id=afs.TENANT, occurred_at_ms=1_700_000_000_000)
        await node.host.event_sink.publish("scratch", "0" * 64, [event])
        assert node.control_db is not None
        assert [e.event_id for e in await node.control_db.events(afs.TENANT)] == [event.id]


async def test_a_node_not_asked_to_wait_opens_them_in_its_start(tmp_path: Path) -> None:
    """Embedded use keeps its promise: without ``answer_first`` the control database
    and queues are open once ``start()`` returned."""
    settings = RuntimeSettings(data_dir=str(tmp_path / "data"),
                               control_db=str(tmp_path / "data" / "control.sqlite"),
                               queues_db=str(tmp_path / "data" / "queues.sqlite"))
    async with Node(settings, objects=afs.ALL_OBJECTS) as node:
        assert node.control_db is not None and node.queues is not None
        assert await node.queues.depth("webhooks") == 0


async def test_the_alarm_index_is_read_once_the_node_answered(tmp_path: Path) -> None:
    """AL-4, issue 28 item 4: a restarted node answering first has not read its alarm index's
    rows when ``start()`` returns (it serves meanwhile); once it answered, every alarm of the
    index is known again."""
    node = _node(tmp_path)
    async with node:
        oid = await afs.new_scratch(node, "ticking")
        due = node.clock.now_ms() + 60_000
        await afs.scratch(node, oid, afs.SetAlarm(at_ms=due))
    restarted = _node(tmp_path)
    async with restarted:
        assert not restarted.alarms_loaded.is_set()
        assert restarted.alarm_book.pending_count == 0
        restarted.answered()
        with anyio.fail_after(30):  # a bound on a hang, not a timing
            await restarted.alarms_loaded.wait()
        assert restarted.alarm_book.pending_count == 1
        assert restarted.alarm_book.entries[("scratch", oid)].at == due


async def test_a_served_node_fires_alarms_with_no_request_and_no_answer(tmp_path: Path) -> None:
    """AL-4, issue 28 items 3-4: a node whose actor side waits for its first answer still makes
    it when no answer comes (a moment after its start), so an alarm due fires though nobody
    ever asked the node anything."""
    async with Node(_settings(tmp_path), clock=FakeClock(), objects=afs.ALL_OBJECTS) as first:
        # The fake clock stands in 2026-01-01 and never moves: the alarm cannot fire before the
        # restart (due 300 ms ahead on the system clock, a first node slow to stop fired it,
        # before the hook below was set, and the served node waited for it in vain), and it is
        # long overdue on the served node's system clock.
        oid = await afs.new_scratch(first, "ticking")
        await afs.scratch(first, oid, afs.SetAlarm(at_ms=first.clock.now_ms() + 300))
    fired = anyio.Event()

    async def seen(_actor: afs.Scratch, _info: object) -> None:
        fired.set()

    afs.ALARM_HOOKS[oid] = seen
    async with _served_node(tmp_path):
        with anyio.fail_after(30):  # a bound on a hang, not a timing
            await fired.wait()
    assert [a.object_id for a in afs.ALARM_LOG] == [oid]


async def test_a_served_node_serves_a_call_that_comes_before_any_answer(tmp_path: Path) -> None:
    """Issue 28 item 3: the first call to a node whose actor side is put off makes it at once
    (it does not wait for the put-off); health answers before it and after, and a node stopped
    with no call made stops cleanly."""
    node = _served_node(tmp_path)
    async with node:
        assert node.health()["status"] == "ok"
        assert node.health()["actors_active"] == 0
        oid = await afs.new_scratch(node, "early")
        assert await afs.scratch(node, oid, afs.Put(k="a", v="1")) == {"k": "a"}
        assert node.health()["actors_active"] == 1
    async with _served_node(tmp_path) as idle:
        assert idle.health()["alarms_pending"] == 0
    assert not node.failed.is_set() and not idle.failed.is_set()
