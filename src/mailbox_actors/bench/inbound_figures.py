"""Inbound figures (PERF, SPEC section 12; IN-4, IN-5): SMTP ingress messages/s through a node's
SMTP door beside aiosmtpd accepting into a no-op handler, with the same aiosmtplib client, and
ingest-to-``wait_poll`` latency.

Both servers run in this process on loopback, on the same event loop as the client, so each side
pays the same client cost. The door's side is the whole path: RCPT resolved in the control
database, DATA ingested (parse, thread, waits, event) into one of ``IDENTITIES`` IdentityMailboxes
through the node's RPC path, 250 after commit. ``CONCURRENCY`` connections each send their share on
one reused connection; rounds alternate; each rate is a median of rounds. Before each round the
door's work from the round before (its events' outbox runs and webhook queue messages) is let
drain, so neither side is measured while the other's leftovers run. The latency is one
``ingest`` through the full in-process RPC path (envelope bytes in and out) followed by the
``wait_poll`` that sees its wait matched, per sample.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import aiosmtplib
import msgspec

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median, percentile
from mailbox_actors.node import Node
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.node.smtp_door import SmtpDoor, smtp_server
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.envelope import Envelope
from mailbox_actors.wire.inbound import Ingest, RegisterWait, WaitFilter, WaitPoll

__all__ = ["INBOUND_FIGURES", "inbound_figures"]

INBOUND_FIGURES = ("smtp_ingress_per_s", "raw_smtpd_accepts_per_s", "ingest_to_wait_poll_p50_ms",
                   "ingest_to_wait_poll_p99_ms")
IDENTITIES = 4
CONCURRENCY = 8
TOKEN = "bench-cluster-token-0123456789"
_ENC = msgspec.json.Encoder()


def _letter(n: int, to: str) -> bytes:
    return (f"From: Bench <bench@example.com>\r\nTo: {to}\r\nSubject: bench message {n}\r\n"
            f"Message-ID: <bench-{n}@example.com>\r\nDate: Tue, 01 Dec 2026 10:00:00 +0000\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n\r\n"
            + "A line of a benchmark message body, about seventy characters long.\r\n" * 12
            ).encode()


class _NoOp:
    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          options: list[str]) -> str:
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        return "250 OK"


async def _send_all(port: int, count: int, start: int, rcpts: list[str]) -> None:
    async def one_connection(k: int) -> None:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=60)
        await client.connect()
        try:
            for n in range(start + k, start + count, CONCURRENCY):
                to = rcpts[n % len(rcpts)]
                await client.sendmail("bench@example.com", [to], _letter(n, to))
        finally:
            await client.quit()

    await asyncio.gather(*(one_connection(k) for k in range(CONCURRENCY)))


async def _settle(queues_db: str, bound_s: float = 5.0) -> None:
    """Until the webhook queue has stayed empty for two looks in a row (or ``bound_s``): the
    door's events of the round before are published and consumed."""
    conn = sqlite3.connect(f"file:{queues_db}?mode=ro", uri=True, timeout=1)
    try:
        empty, deadline = 0, time.monotonic() + bound_s
        while empty < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            try:
                left = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
            except sqlite3.OperationalError:  # locked for a moment by the consumer's write
                left = 1
            empty = empty + 1 if left == 0 else 0
    finally:
        conn.close()


async def _rate(port: int, count: int, start: int, rcpts: list[str]) -> float:
    t0 = time.perf_counter()
    await _send_all(port, count, start, rcpts)
    return count / (time.perf_counter() - t0)


async def inbound_figures(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                          _errors: list[str]) -> list[Figure]:
    queues_db = str(work / "queues.sqlite")
    settings = RuntimeSettings(data_dir=str(work / "node"), control_db=str(work / "control.sqlite"),
                               queues_db=queues_db)
    per_round = max(40, sizes.state_calls // 10)
    rounds = max(3, sizes.rounds)
    loop = asyncio.get_running_loop()
    async with Node(settings) as node:
        db = node.control_db
        assert db is not None
        tenant = await db.create_tenant("bench")
        rcpts = [f"bench{i}@example.com" for i in range(IDENTITIES)]
        idents = [await create_identity(db, node, tenant.id, f"bench{i}", [rcpts[i]])
                  for i in range(IDENTITIES)]
        app = NodeApp(node, cluster_token=TOKEN, operator_token=TOKEN + "-operator")
        door = SmtpDoor.for_node(app, node, TOKEN,
                                max_message_bytes=settings.inbound.max_message_bytes)
        door_port = await door.start("127.0.0.1", 0)
        # The same aiosmtpd settings as the door's (size limit, hostname, SMTPUTF8, timeout).
        noop = await loop.create_server(
            lambda: smtp_server(_NoOp(), max_message_bytes=settings.inbound.max_message_bytes,
                                hostname="mailbox-actors"), "127.0.0.1", 0)
        noop_port = int(noop.sockets[0].getsockname()[1])
        try:
            ours: list[float] = []
            raw: list[float] = []
            sent = 0
            await _send_all(door_port, CONCURRENCY * 4, 10_000_000, rcpts)  # warm both paths
            await _send_all(noop_port, CONCURRENCY * 4, 10_000_000, rcpts)
            for r in range(rounds):
                # The side that goes first alternates; each side starts with the door's events
                # of the round before drained.
                for side in (("raw", "door") if r % 2 == 0 else ("door", "raw")):
                    await _settle(queues_db)
                    if side == "raw":
                        raw.append(await _rate(noop_port, per_round, sent, rcpts))
                    else:
                        ours.append(await _rate(door_port, per_round, sent, rcpts))
                progress.say(f"inbound: SMTP round {r + 1}/{rounds} ({per_round} messages a "
                             f"side): door {ours[-1]:,.0f}/s, raw {raw[-1]:,.0f}/s, ratio "
                             f"{ours[-1] / raw[-1]:.3f}")
                sent += per_round
            latencies = await _ingest_to_poll(node, idents[0], max(50, per_round // 2))
        finally:
            noop.close()
            await noop.wait_closed()
            await door.stop()
    limit = median(raw)
    ratios = [o / r for o, r in zip(ours, raw, strict=True)]
    ordered = sorted(ratios)
    return [
        figure("smtp_ingress_per_s", limit * median(ratios), "msg/s", limit=limit,
               goal=Goal(kind="ratio_at_least", bound=0.5),
               note=f"{CONCURRENCY} connections, {IDENTITIES} mailboxes, {rounds} rounds of "
                    f"{per_round} messages a side, the side that goes first alternating; value = "
                    f"limit x the median of the rounds' ratios ({', '.join(f'{x:.3f}' for x in ratios)}"
                    f": median {median(ratios):.3f}, middle half {ordered[len(ordered) // 4]:.3f}-"
                    f"{ordered[(3 * len(ordered)) // 4]:.3f}), limit = the raw side's median; "
                    f"the door's median rate {median(ours):,.0f}/s; 250 after each ingest "
                    "committed; the message.received events' publishing after the round "
                    "(outbox, queue, webhooks) drained untimed between rounds"),
        figure("raw_smtpd_accepts_per_s", limit, "msg/s",
               note="aiosmtpd into a no-op handler, same client and concurrency"),
        figure("ingest_to_wait_poll_p50_ms", percentile(latencies, 50), "ms",
               goal=Goal(kind="below", bound=50)),
        figure("ingest_to_wait_poll_p99_ms", percentile(latencies, 99), "ms",
               goal=Goal(kind="below", bound=50),
               note=f"{len(latencies)} samples: ingest then the wait_poll that sees it matched"),
    ]


async def _ingest_to_poll(node: Node, ident: Any, samples: int) -> list[float]:
    ids = {"tenant_id": ident.tenant_id, "identity_id": ident.id}
    out = []
    for n in range(samples):
        wait = await node.call("identity_mailbox", ident.mailbox_id, RegisterWait(
            filter=WaitFilter(subject_contains=f"probe {n} "),
            expires_at_ms=node.clock.now_ms() + 60_000), **ids)
        raw = _letter(n, "bench0@example.com").replace(b"bench message", b"probe %d " % n, 1)
        body = _ENC.encode(Envelope(v=1, **ids, request_id=f"req_bench{n}",
                                    deadline_ms=node.clock.now_ms() + 30_000,
                                    req=Ingest(source_id=f"probe-{n}", raw=raw)))
        t0 = time.perf_counter()
        await node.call_bytes("identity_mailbox", ident.mailbox_id, body)
        got = await node.call("identity_mailbox", ident.mailbox_id,
                              WaitPoll(wait_id=wait["wait_id"]), **ids)
        out.append((time.perf_counter() - t0) * 1000)
        if got["status"] != "matched":
            raise RuntimeError("a probe's wait did not match")
    return out
