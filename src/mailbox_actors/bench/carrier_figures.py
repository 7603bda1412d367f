"""The Carrier figures (SPEC section 12): ``submit`` calls/s beside the runtime's durable state
changes/s; dispatches/s to an aiosmtpd sink beside raw aiosmtplib sends on one reused connection;
submit-to-``provider_accepted`` p50/p99 at 100 submits/s.

``submit`` goes through ``Node.call_bytes`` (the whole RPC path: decode, route, owner and deadline
checks, the validation, one transaction with the Email, its Message, its content, its event and
the dispatch wake), each to a new recipient, in rounds interleaved with ``tenant_quota.reserve``
on the same node. Dispatch runs as it does in production: the mailbox's ``alarm:dispatch`` on the
system clock, TenantQuota consulted, intent committed, the real ``SmtpTransport``, the outcome
committed. Both sides send at the same concurrency (SPEC section 12): the transport has one
connection, reused, as the raw side has; the raw side's connection is open before it is timed,
as the transport's is after the first round. Short rounds alternate which side goes first, so
both see the same load on a shared machine.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import anyio
import msgspec
from aiosmtplib import SMTP

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median, percentile
from mailbox_actors.bench.runtime_figures import BIG_LIMIT, FAR_DEADLINE_MS
from mailbox_actors.bench.runtime_figures import envelope as quota_envelope
from mailbox_actors.bench.smtp_figures import bench_email, spawn_smtp_sink, stop_smtp_sink
from mailbox_actors.node import Node
from mailbox_actors.platform.mail.mime import build_message
from mailbox_actors.platform.mail.smtp import SmtpConfig, SmtpTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT, Transport
from mailbox_actors.platform.services import Services
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.carrier import Submit
from mailbox_actors.wire.envelope import Envelope
from mailbox_actors.wire.mailbox import MailboxInit
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve
from mailbox_actors.wire.transport import OutboundEmail, ProviderAccepted, TransportOutcome

__all__ = ["CARRIER_FIGURES", "carrier_figures"]

CARRIER_FIGURES: tuple[str, ...] = (
    "submit_per_s", "carrier_state_changes_per_s", "dispatches_per_s",
    "carrier_raw_smtp_sends_per_s", "submit_to_accepted_p50_ms", "submit_to_accepted_p99_ms")
NS = "identity_mailbox"
TENANT, IDENTITY = "t_bench", "idn_bench"
_ENC = msgspec.json.Encoder()
_TEXT = "Hello from the benchmark.\n" * 12


def _envelope(req: object, n: int = 0) -> bytes:
    return _ENC.encode(Envelope(v=1, tenant_id=TENANT, identity_id=IDENTITY,
                                request_id=f"req_c{n}", deadline_ms=FAR_DEADLINE_MS, req=req))


def _submit(tag: str, i: int) -> bytes:
    return _envelope(Submit(source_id=f"{tag}-{i}", from_="sender@bench.test",
                            to=[f"rcpt-{tag}-{i}@bench.test"], subject="Benchmark message",
                            text=_TEXT), i)


def _ok(out: bytes) -> None:
    if not out.startswith(b'{"ok"'):
        raise RuntimeError(f"benchmark call failed: {out[:300]!r}")


async def _round(node: Node, ns: str, oid: str, bodies: list[bytes]) -> float:
    call = node.call_bytes
    t = time.perf_counter()
    for body in bodies:
        out = await call(ns, oid, body)
        if not out.startswith(b'{"ok"'):
            _ok(out)
    return len(bodies) / (time.perf_counter() - t)


class _Watch:
    """Wraps the node's transport: when each Email's acceptance came back, and a wake when the
    count reaches what a phase waits for."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.accepted_at: dict[str, float] = {}
        self.other = 0
        self.want = 0
        self.done = anyio.Event()
        self.gate: anyio.Event | None = None  # while set up and not set, sends wait
        self.first_send: float | None = None

    def expect(self, n: int, gated: bool = False) -> None:
        self.accepted_at.clear()
        self.want, self.done = n, anyio.Event()
        self.gate = anyio.Event() if gated else None
        self.first_send = None

    async def send(self, email: OutboundEmail) -> TransportOutcome:
        if self.gate is not None:
            await self.gate.wait()
        if self.first_send is None:
            self.first_send = time.perf_counter()
        outcome = await self.inner.send(email)
        if isinstance(outcome, ProviderAccepted):
            self.accepted_at[email.email_id] = time.perf_counter()
        else:
            self.other += 1
        if len(self.accepted_at) >= self.want:
            self.done.set()
        return outcome

    @property
    def slots(self) -> int:
        return int(getattr(self.inner, "slots", 4))

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Raw:
    """aiosmtplib's ``sendmail`` on one connection, opened once and reused by every round."""

    def __init__(self, port: int) -> None:
        self.email = bench_email()
        self.message = build_message(self.email, date_s=0)
        self.smtp = SMTP(hostname="127.0.0.1", port=port, start_tls=False,
                         local_hostname="bench.test")

    async def rate(self, count: int) -> float:
        if not self.smtp.is_connected:
            await self.smtp.connect()
        email, message = self.email, self.message
        t0 = time.perf_counter()
        for _ in range(count):
            await self.smtp.sendmail(email.from_, email.recipients, message)
        return count / (time.perf_counter() - t0)

    def close(self) -> None:
        self.smtp.close()


def _settings(work: Path, name: str) -> RuntimeSettings:
    # Every submit names a new recipient, so the cap never refuses; a large cap keeps it so.
    return RuntimeSettings(data_dir=str(work / name), recipient_cap=1_000_000,
                           mail_recheck_ms=86_400_000)


async def _submit_vs_state(work: Path, sizes: Sizes, progress: Progress
                           ) -> tuple[float, float, int, int]:
    n, rounds = sizes.state_calls, sizes.rounds
    sub_rates: list[float] = []
    state_rates: list[float] = []
    async with Node(_settings(work, "submit")) as node:  # transport none: submit alone is timed
        mid = node.id_from_name(NS, "bench-submit")
        qid = node.id_from_name("tenant_quota", "bench-state")
        _ok(await node.call_bytes(NS, mid, _envelope(MailboxInit())))
        _ok(await node.call_bytes("tenant_quota", qid, quota_envelope(
            QuotaInit(per_minute=BIG_LIMIT, per_day=BIG_LIMIT))))
        await _round(node, NS, mid, [_submit("w", i) for i in range(min(n, 500))])
        await _round(node, "tenant_quota", qid, [quota_envelope(QuotaReserve(key=f"w{i}"), i)
                                                 for i in range(min(n, 500))])
        for r in range(rounds):
            subs = [_submit(f"r{r}", i) for i in range(n)]
            reserves = [quota_envelope(QuotaReserve(key=f"r{r}k{i}"), i) for i in range(n)]
            if r % 2 == 0:
                sub_rates.append(await _round(node, NS, mid, subs))
                state_rates.append(await _round(node, "tenant_quota", qid, reserves))
            else:
                state_rates.append(await _round(node, "tenant_quota", qid, reserves))
                sub_rates.append(await _round(node, NS, mid, subs))
            progress.say(f"  carrier round {r + 1}/{rounds}: submit {sub_rates[-1]:,.0f}/s, "
                         f"reserve {state_rates[-1]:,.0f}/s")
    return median(sub_rates), median(state_rates), rounds, n


async def _drained(node: Node, mid: str) -> None:
    """Until the mailbox's outbox has published every event (at most 5 s): the events of the
    dispatch round just timed go out after its alarm run, and the raw side timed next must not
    share the loop with them (they took 4-12 ms of a 200-400 ms raw round)."""
    path = node.host.path_for(NS, mid)
    with anyio.move_on_after(5):
        while True:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
                left = conn.execute("SELECT count(*) FROM outbox "
                                    "WHERE dispatched_at IS NULL").fetchone()[0]
            if not left:
                return
            await anyio.sleep(0.002)


async def _dispatch_rate(watch: _Watch, count: int) -> float:
    assert watch.gate is not None
    watch.gate.set()
    with anyio.fail_after(600):
        await watch.done.wait()
    assert watch.first_send is not None
    return count / (max(watch.accepted_at.values()) - watch.first_send)


async def carrier_figures(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                          errors: list[str]) -> list[Figure]:
    """The figures of ``want`` (the submit pair and the dispatch rows each run only if wanted)."""
    out: list[Figure] = []
    if want & {"submit_per_s", "carrier_state_changes_per_s"}:
        out += await _submit_figures(work, sizes, progress)
    if want - {"submit_per_s", "carrier_state_changes_per_s"}:
        out += await _dispatch_figures(work, sizes, progress, errors)
    return out


async def _submit_figures(work: Path, sizes: Sizes, progress: Progress) -> list[Figure]:
    progress.say("carrier: submit vs tenant_quota.reserve, interleaved")
    submit_rate, state_rate, rounds, n = await _submit_vs_state(work, sizes, progress)
    note = f"median of {rounds} interleaved rounds of {n} calls through Node.call_bytes"
    return [
        figure("submit_per_s", submit_rate, "calls/s", goal=Goal("ratio_at_least", 0.5),
               limit=state_rate, note=note + ", each to a new recipient"),
        figure("carrier_state_changes_per_s", state_rate, "tx/s",
               note="tenant_quota.reserve on the same node, interleaved with submit"),
    ]


async def _dispatch_figures(work: Path, sizes: Sizes, progress: Progress,
                            errors: list[str]) -> list[Figure]:
    count = {"tiny": 30, "quick": 200}.get(sizes.name, 500)
    paced = {"tiny": 20, "quick": 300}.get(sizes.name, 1_000)
    d_rounds = {"tiny": 2, "quick": 9}.get(sizes.name, 15)
    proc, port = await spawn_smtp_sink()
    watch = _Watch(SmtpTransport(SmtpConfig(host="127.0.0.1", port=port, pool_size=1,
                                            local_hostname="bench.test")))
    raw = _Raw(port)
    dispatch_rates: list[float] = []
    raw_rates: list[float] = []
    latencies: list[float] = []
    try:
        async with Node(_settings(work, "dispatch"),
                        services=Services({MAIL_TRANSPORT: watch})) as node:
            mid = node.id_from_name(NS, "bench-dispatch")
            _ok(await node.call_bytes(NS, mid, _envelope(MailboxInit())))
            # The tenant's quota, roomy: each dispatch reserves in it, as in production.
            _ok(await node.call_bytes("tenant_quota", node.id_from_name("tenant_quota", TENANT),
                                      quota_envelope(QuotaInit(per_minute=BIG_LIMIT,
                                                               per_day=BIG_LIMIT))))
            progress.say(f"carrier: {d_rounds} dispatch rounds of {count} emails, each beside "
                         "as many raw sends")
            for r in range(d_rounds):
                # Submitted first, sent once all are queued: the figure times dispatch alone,
                # from the first send to the last acceptance.
                watch.expect(count, gated=True)
                for i in range(count):
                    _ok(await node.call_bytes(NS, mid, _submit(f"d{r}", i)))
                if r % 2:
                    raw_rates.append(await raw.rate(count))
                dispatch_rates.append(await _dispatch_rate(watch, count))
                if not r % 2:
                    await _drained(node, mid)
                    raw_rates.append(await raw.rate(count))
            progress.say(f"carrier: {paced} submits at 100/s, each timed to provider_accepted")
            # Latency as in production: the transport's default pool (the rate rows compare one
            # connection with one).
            await watch.inner.aclose()
            watch.inner = SmtpTransport(SmtpConfig(host="127.0.0.1", port=port,
                                                   local_hostname="bench.test"))
            watch.expect(paced)
            submitted: dict[str, float] = {}
            start = time.perf_counter()
            for i in range(paced):
                await anyio.sleep(max(0.0, start + i / 100 - time.perf_counter()))
                t = time.perf_counter()
                out = await node.call_bytes(NS, mid, _submit("p", i))
                _ok(out)
                submitted[msgspec.json.decode(out)["ok"]["email_id"]] = t
            with anyio.fail_after(600):
                await watch.done.wait()
            latencies = [watch.accepted_at[e] - t for e, t in submitted.items()]
    finally:
        raw.close()
        await watch.aclose()
        await stop_smtp_sink(proc)
    if watch.other:
        errors.append(f"carrier: {watch.other} benchmark sends were not accepted")
    d_note = (f"median of {d_rounds} rounds of {count} emails queued in one identity, first "
              "send to last acceptance (checks, quota, intent, send, outcome each; the transport "
              "on one reused connection); raw: aiosmtplib sendmail of the same count, one after "
              "another on one reused connection to the same aiosmtpd sink (its own process); "
              "the rounds alternate which side goes first (a raw round after a dispatch round waits "
              "until the mailbox's outbox has published that round's events); the transport "
              "writes MAIL and RCPT "
              "itself, without the address parse sendmail does on the raw side")
    p_note = (f"{paced} submits paced at 100/s to one identity; submit call to the transport's "
              "acceptance (the transport's default pool of connections)")
    return [
        figure("dispatches_per_s", median(dispatch_rates), "emails/s",
               goal=Goal("ratio_at_least", 0.7), limit=median(raw_rates), note=d_note),
        figure("carrier_raw_smtp_sends_per_s", median(raw_rates), "sends/s",
               note="aiosmtplib sendmail on one reused connection"),
        Figure(figure="submit_to_accepted_p50_ms", value=percentile(latencies, 50) * 1000,
               unit="ms", limit=None, ratio=None, target="no target", passed=None, note=p_note),
        figure("submit_to_accepted_p99_ms", percentile(latencies, 99) * 1000, "ms",
               goal=Goal("below", 50), note=p_note),
    ]
