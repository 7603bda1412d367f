"""Inspection figures (UI-1, issue 25): what the console's pages ask of a node with 100,000 actors
on disk and 10,000 messages in one mailbox, through the node's HTTP application in process.

The actors are hard links to one TenantQuota file (as the restart figures make theirs, with
``bench.population``), every one evicted; the mailbox is filled by ``ingest_batch``. Timed: the
overview (``/admin/inspect``), a page of 50 actors at a cursor anywhere in the namespace, one
actor (``show``), and a page of the mailbox's ``messages`` rows at a cursor anywhere in them. The
goal is the issue's: p99 under 100 ms each. Activations during the reads are counted: inspection
must cost none.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import msgspec

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, percentile
from mailbox_actors.bench.population import LinkedPopulation
from mailbox_actors.node import Node
from mailbox_actors.node.app import NodeApp
from mailbox_actors.objects.identity_mailbox.ingest_batch import IngestBatch
from mailbox_actors.platform.storage.readonly import read_only
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.envelope import ENVELOPE_VERSION, Envelope
from mailbox_actors.wire.inbound import Ingest
from mailbox_actors.wire.mailbox import MailboxInit
from mailbox_actors.wire.quota import QuotaInit

__all__ = ["INSPECT_FIGURES", "inspect_figures"]

INSPECT_FIGURES = ("inspect_overview_p99_ms", "inspect_actors_page_p99_ms",
                   "inspect_actor_show_p99_ms", "inspect_rows_page_p99_ms",
                   "inspect_activations")
SAMPLES = 300
_NS = "tenant_quota"
_OPERATOR = "bench-operator-token-0123456789"
_AUTH = {"authorization": f"Bearer {_OPERATOR}"}
_DEC = msgspec.json.Decoder(dict[str, Any])


def _letter(n: int) -> bytes:
    return (f"From: <sender{n % 50}@example.com>\r\nTo: owner@example.com\r\n"
            f"Subject: message {n}\r\nMessage-ID: <inspect-{n}@example.com>\r\n\r\n"
            f"body of message {n}\r\n").encode()


async def _population(data: Path, n: int, progress: Progress,
                      ) -> tuple[LinkedPopulation, list[str]]:
    """``n`` TenantQuota files under ``data`` (links to one, each with its log), their ids."""
    tpl = data.parent / f"{data.name}-template"
    async with Node(RuntimeSettings(data_dir=str(tpl))) as node:
        oid = node.id_from_name(_NS, "template")
        await node.call(_NS, oid, QuotaInit(per_minute=5, per_day=10), tenant_id="ten_bench")
        # init's alarm is due at once: run it here (it sets the next a day on), or every link
        # would carry a due alarm and the inspected node would fire them all into one inode.
        await node.fire_alarm_now(_NS, oid)
        source = node.host.path_for(_NS, oid)
    # Its log stays as the node left it (a sleeping actor keeps its last commits there): each
    # link gets the log beside it, and a listing reads the file with its log, as it would a
    # real sleeping actor's (a file without one reads about a fifth faster).
    with read_only(source) as conn:
        assert conn is not None
        due = conn.execute("SELECT at_ms FROM _ma_alarm").fetchall()
    if due and due[0][0] <= time.time() * 1000 + 3_600_000:
        raise RuntimeError("the inspection population's template has a due alarm: its links "
                           "would all fire it")
    target = Node(RuntimeSettings(data_dir=str(data)))  # not started: its paths only
    ids = [target.id_from_name(_NS, f"tenant-{i}") for i in range(n)]
    # Links to the one file (``bench.population``): the figures only read them.
    population = LinkedPopulation(source, data.parent / f"{data.name}-sources", log=True)
    population.link((target.host.path_for(_NS, oid) for oid in ids), n, progress)
    shutil.rmtree(tpl)
    return population, sorted(ids)


async def _settle(node: Node, mailbox_id: str) -> None:
    """Run the mailbox's due alarm now (its first Post attempt, the roster's letter, which on a
    loaded machine may still be due after the ingest) and refuse to measure while any alarm
    falls due within the minute: one that woke an evicted actor inside the measured window
    would count as an inspection's activation."""
    await node.fire_alarm_now("identity_mailbox", mailbox_id)
    scheduler = node.scheduler
    assert scheduler is not None
    due = scheduler.next_due_ms()
    if due is not None and due <= node.clock.now_ms() + 60_000:
        raise RuntimeError(f"an alarm is due in {due - node.clock.now_ms()} ms: the inspection "
                           "figures would count its activation")


async def _timed(app: NodeApp, paths: list[str]) -> list[float]:
    times = []
    for path in paths:
        t0 = time.perf_counter()
        status, body, *_ = await app("GET", path, _AUTH, b"")
        times.append((time.perf_counter() - t0) * 1000)
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}: {body[:200]!r}")
    return times


async def inspect_figures(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                          _errors: list[str]) -> list[Figure]:
    actors = sizes.restart_actors[2]
    messages = 10_000 if sizes.name != "tiny" else 40
    rng = random.Random(20261206)
    data = work / "inspect-node"
    progress.say(f"inspect: {actors:,} actor files, then {messages:,} messages in one mailbox")
    population, ids = await _population(data, actors, progress)
    stamp = population.stamp()
    async with Node(RuntimeSettings(data_dir=str(data))) as node:
        app = NodeApp(node, cluster_token="bench-cluster-token-0123456789",
                      operator_token=_OPERATOR)
        mid = node.id_from_name("identity_mailbox", "inspect-bench")
        tenant, identity = "ten_bench", "idn_bench"
        await node.call("identity_mailbox", mid, MailboxInit(), tenant_id=tenant,
                        identity_id=identity)
        for start in range(0, messages, 100):
            items = [Ingest(source_id=f"s{n}", raw=_letter(n))
                     for n in range(start, min(messages, start + 100))]
            # The SMTP door's in-process batch (one transaction a hundred messages).
            await node.router.call_envelope("identity_mailbox", mid, Envelope(
                v=ENVELOPE_VERSION, tenant_id=tenant, identity_id=identity,
                request_id=node.ids.new_id("req"), actor_key_id=None,
                deadline_ms=node.clock.now_ms() + 600_000, req=IngestBatch(items=items)))
            progress.tick("inspect: {:,}/{:,} messages", start + len(items), messages)
        await _settle(node, mid)
        node.host.evict_all_idle()
        cursors = app.inspection.inspector.cursors
        scope = f"identity_mailbox/{mid}/messages"
        pages = [f"/admin/actors/{_NS}?limit=50" + (
            f"&cursor={cursors.make('actors', _NS, [rng.choice(ids)])}" if i % 4 else "")
            for i in range(SAMPLES)]
        shows = [f"/admin/actors/{_NS}/{rng.choice(ids)}" for _ in range(SAMPLES)]
        rows = [f"/admin/actors/identity_mailbox/{mid}/rows/messages?limit=50" + (
            f"&cursor={cursors.make('rows', scope, [['v', rng.randint(1, messages)]])}"
            if i % 4 else "") for i in range(SAMPLES)]
        await _timed(app, ["/admin/inspect", pages[1], shows[0], rows[1]])  # first use: made
        before = node.host.activations
        progress.say(f"inspect: {SAMPLES} requests of each kind")
        overview = await _timed(app, ["/admin/inspect"] * SAMPLES)
        page = await _timed(app, pages)
        show = await _timed(app, shows)
        row = await _timed(app, rows)
        activations = node.host.activations - before
        _, body, *_ = await app("GET", "/admin/inspect", _AUTH, b"")
        counted = {c["namespace"]: c["actors"] for c in _DEC.decode(body)["namespaces"]}
        if counted.get(_NS) != actors:
            raise RuntimeError(f"the overview counted {counted.get(_NS)} of {actors} actors")
    # Reading never writes: a write through one link would have changed every actor listed.
    population.check_unwritten(stamp)
    note = (f"{actors:,} evicted actors on disk and {messages:,} messages in one mailbox; "
            f"{SAMPLES} requests each through the node's HTTP application in process (routing, "
            "token, JSON), pages of 50 at cursors anywhere")
    goal = Goal(kind="below", bound=100)
    return [
        figure("inspect_overview_p99_ms", percentile(overview, 99), "ms", goal=goal, note=note),
        figure("inspect_actors_page_p99_ms", percentile(page, 99), "ms", goal=goal),
        figure("inspect_actor_show_p99_ms", percentile(show, 99), "ms", goal=goal),
        figure("inspect_rows_page_p99_ms", percentile(row, 99), "ms", goal=goal),
        figure("inspect_activations", float(activations), "activations",
               goal=Goal(kind="below", bound=0.5),
               note="activations while inspecting: reading never activates an actor"),
    ]
