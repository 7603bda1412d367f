"""The SMTP figures (PERF, SPEC section 12; CA-8): sends/s through ``SmtpTransport`` beside raw
aiosmtplib sends on one reused connection, to the same aiosmtpd sink, in the same run.

The sink (``SmtpSink``, keeping no messages) runs in a child process of its own, started and
stopped here by pid, so the client loop measured here is alone. Both sides send the same message
bytes one after another (a Carrier dispatches one Email at a time per actor); rounds alternate and
each figure is a median of rounds. ``raw_smtp_sends`` and ``spawn_smtp_sink`` are the pieces the
Carrier's dispatch figure is measured with too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiosmtplib import SMTP

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median, percentile
from mailbox_actors.bench.servers import spawn_fixture, stop_fixture
from mailbox_actors.platform.mail.mime import build_message
from mailbox_actors.platform.mail.smtp import SmtpConfig, SmtpTransport
from mailbox_actors.wire.transport import OutboundEmail, ProviderAccepted

__all__ = ["SMTP_FIGURES", "bench_email", "raw_smtp_sends", "smtp_figures", "spawn_smtp_sink",
           "stop_smtp_sink", "transport_sends"]

SMTP_FIGURES = ("smtp_transport_sends_per_s", "smtp_transport_p99_ms", "raw_smtp_sends_per_s")
HOST = "127.0.0.1"


def bench_email(n: int = 0) -> OutboundEmail:
    """A small, realistic message (one recipient, a few hundred bytes of text)."""
    return OutboundEmail(email_id=f"eml_bench{n}", message_id_header=f"<bench{n}@bench.test>",
                         from_="sender@bench.test", to=["rcpt@bench.test"],
                         subject="Benchmark message", text="Hello from the benchmark.\n" * 12)


async def spawn_smtp_sink() -> tuple[asyncio.subprocess.Process, int]:
    """Start an ``SmtpSink`` (messages counted, not kept) in a child process; returns it and its
    port. Stop it with ``stop_smtp_sink``."""
    return await spawn_fixture("mailbox_actors.testing.smtp")


async def stop_smtp_sink(proc: asyncio.subprocess.Process) -> None:
    await stop_fixture(proc)


async def raw_smtp_sends(port: int, count: int, *, host: str = HOST,
                         email: OutboundEmail | None = None) -> list[float]:
    """``count`` sends of one message with aiosmtplib's ``sendmail`` on one connection, one after
    another; returns each send's seconds (the limit the transport is held against)."""
    email = email or bench_email()
    message = build_message(email, date_s=0)
    smtp = SMTP(hostname=host, port=port, start_tls=False, local_hostname="bench.test")
    await smtp.connect()
    latencies: list[float] = []
    try:
        for _ in range(count):
            t0 = time.perf_counter()
            await smtp.sendmail(email.from_, email.recipients, message)
            latencies.append(time.perf_counter() - t0)
    finally:
        smtp.close()
    return latencies


async def transport_sends(transport: SmtpTransport, count: int,
                          email: OutboundEmail | None = None) -> list[float]:
    """``count`` sends through ``transport``, one after another; each send's seconds."""
    email = email or bench_email()
    latencies: list[float] = []
    for _ in range(count):
        t0 = time.perf_counter()
        outcome = await transport.send(email)
        latencies.append(time.perf_counter() - t0)
        if not isinstance(outcome, ProviderAccepted):
            raise RuntimeError(f"the sink refused a benchmark send: {outcome}")
    return latencies


async def smtp_figures(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                       errors: list[str]) -> list[Figure]:
    rounds = 3 if sizes.name != "full" else 7
    count = {"tiny": 30, "quick": 1_000}.get(sizes.name, 3_000)
    proc, port = await spawn_smtp_sink()
    transport = SmtpTransport(SmtpConfig(host=HOST, port=port, local_hostname="bench.test"))
    try:
        raw_rates: list[float] = []
        ours_rates: list[float] = []
        ours_lat: list[float] = []

        async def timed(fn: Callable[[], Awaitable[list[float]]], into: list[float]) -> list[float]:
            t0 = time.perf_counter()
            lat = await fn()
            into.append(len(lat) / (time.perf_counter() - t0))
            return lat

        for r in range(rounds):
            progress.say(f"smtp: round {r + 1}/{rounds}, {count} sends per side")
            await timed(lambda: raw_smtp_sends(port, count), raw_rates)
            ours_lat += await timed(lambda: transport_sends(transport, count), ours_rates)
    finally:
        await transport.aclose()
        await stop_smtp_sink(proc)
    raw = median(raw_rates)
    note = f"{rounds} rounds of {count} sequential sends to an aiosmtpd sink in its own process"
    return [
        figure("smtp_transport_sends_per_s", median(ours_rates), "sends/s",
               goal=Goal("ratio_at_least", 0.7), limit=raw, note=note),
        Figure(figure="smtp_transport_p99_ms", value=percentile(ours_lat, 99) * 1000, unit="ms",
               limit=None, ratio=None, target="no target", passed=None,
               note=f"p50 {percentile(ours_lat, 50) * 1000:.2f} ms"),
        figure("raw_smtp_sends_per_s", raw, "sends/s",
               note="aiosmtplib sendmail on one reused connection"),
    ]

