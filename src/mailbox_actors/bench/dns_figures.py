"""The domain-check figure (PERF, SPEC section 12; DM-1, DM-2): DomainMonitor checks/s beside raw
dnspython lookups of the same records, against the same DNS server on loopback, in the same run.

The server (``mailbox_actors.testing.dns`` on dnslib) runs in a child process of its own, started
and stopped here by pid, serving one zone for ``DOMAINS`` domains. Our side is the whole ``check``
op through the node (route, actor, resolver, the SPF planner's two rounds, the checks, the state
transaction); the limit asks the same five questions a check asks (MX, SPF, the provider include,
DKIM, DMARC) with a bare ``dns.asyncresolver.Resolver`` and counts each set of five as one. Both
sides run ``CONCURRENCY`` at a time; rounds alternate; each figure is a median of rounds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import dns.asyncresolver

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, median
from mailbox_actors.bench.servers import spawn_fixture, stop_fixture
from mailbox_actors.node import Node
from mailbox_actors.platform.dns.resolver import DnsSettings
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.domain import DomainCheck, DomainInit, ExpectedRecords

__all__ = ["DNS_FIGURES", "bench_zone", "dns_figures", "spawn_dns_server"]

DNS_FIGURES = ("domain_checks_per_s", "raw_dns_record_sets_per_s")
DOMAINS = 32
CONCURRENCY = 32
INCLUDE = "_spf.provider.bench"
EXPECTED = ExpectedRecords(spf_include=INCLUDE, dkim_selector="s1",
                           mx_hosts=["mx1.provider.bench"])


def _domain(i: int) -> str:
    return f"bench-{i}.example"


def bench_zone() -> dict[str, list[list[str]]]:
    records = [[INCLUDE, "TXT", "v=spf1 ip4:192.0.2.0/24 -all"]]
    for i in range(DOMAINS):
        d = _domain(i)
        records += [[d, "MX", "10 mx1.provider.bench"],
                    [d, "TXT", f"v=spf1 include:{INCLUDE} -all"],
                    [f"s1._domainkey.{d}", "TXT", "v=DKIM1; k=rsa; p=MIGfMA0GCSqGSIb3DQEBAQUAA4"],
                    [f"_dmarc.{d}", "TXT", "v=DMARC1; p=reject"]]
    return {"records": records}


def _questions(i: int) -> list[tuple[str, str]]:
    d = _domain(i)
    return [(d, "MX"), (d, "TXT"), (INCLUDE, "TXT"), (f"s1._domainkey.{d}", "TXT"),
            (f"_dmarc.{d}", "TXT")]


def _write_zone(work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    zone = work / "zone.json"
    zone.write_text(json.dumps(bench_zone()))
    return zone


async def spawn_dns_server(work: Path) -> tuple[asyncio.subprocess.Process, int]:
    """The loopback DNS server in a child process, serving ``bench_zone``; it and its port."""
    zone = _write_zone(work)  # a few hundred bytes, before anything runs concurrently
    return await spawn_fixture("mailbox_actors.testing.dns", "--zone", str(zone))


async def _spread(count: int, one: Callable[[int], Awaitable[None]]) -> float:
    """``count`` calls of ``one(i)``, ``CONCURRENCY`` at a time; calls per second."""
    next_i = 0

    async def worker() -> None:
        nonlocal next_i
        while next_i < count:
            i, next_i = next_i, next_i + 1
            await one(i)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(CONCURRENCY):
            tg.start_soon(worker)
    return count / (time.perf_counter() - t0)


async def dns_figures(work: Path, sizes: Sizes, progress: Progress, want: frozenset[str],
                      errors: list[str]) -> list[Figure]:
    rounds = 3 if sizes.name != "full" else 7
    count = {"tiny": 40, "quick": 1_500}.get(sizes.name, 5_000)
    proc, port = await spawn_dns_server(work)
    raw = dns.asyncresolver.Resolver(configure=False)
    raw.nameservers, raw.port, raw.timeout, raw.lifetime = ["127.0.0.1"], port, 2.0, 4.0
    settings = RuntimeSettings(data_dir=str(work / "node"), dns=DnsSettings(
        nameservers=("127.0.0.1",), port=port, timeout_ms=2_000, attempts=2))
    try:
        async with Node(settings) as node:
            ids = [node.id_from_name("domain_monitor", _domain(i)) for i in range(DOMAINS)]
            for i, oid in enumerate(ids):
                await node.call("domain_monitor", oid,
                                DomainInit(domain=_domain(i), expected=EXPECTED), tenant_id="b")
            first = await node.call("domain_monitor", ids[0], DomainCheck(), tenant_id="b")
            if first["verdict"] != "pass":  # the zone must verify, or the figure means nothing
                raise RuntimeError(f"a benchmark domain did not verify: {first['results']}")

            async def check(i: int) -> None:
                reply = await node.call("domain_monitor", ids[i % DOMAINS], DomainCheck(),
                                        tenant_id="b")
                if reply["verdict"] != "pass":
                    raise RuntimeError(f"a benchmark check did not pass: {reply['results']}")

            async def raw_set(i: int) -> None:
                async with anyio.create_task_group() as tg:
                    for name, rtype in _questions(i % DOMAINS):
                        tg.start_soon(lambda n=name, t=rtype: raw.resolve(  # type: ignore[misc]
                            n, t, raise_on_no_answer=False))

            ours: list[float] = []
            limit: list[float] = []
            for r in range(rounds):
                progress.say(f"dns: round {r + 1}/{rounds}, {count} checks and {count} raw sets")
                limit.append(await _spread(count, raw_set))
                ours.append(await _spread(count, check))
    finally:
        await stop_fixture(proc)
    note = (f"{rounds} rounds of {count}, {CONCURRENCY} at a time, {DOMAINS} domains; a raw set is "
            "the check's 5 questions asked at once with dnspython (no actor, no verdicts)")
    return [
        figure("domain_checks_per_s", median(ours), "checks/s",
               goal=Goal("ratio_at_least", 0.5), limit=median(limit), note=note),
        figure("raw_dns_record_sets_per_s", median(limit), "sets/s",
               note="dns.asyncresolver against the same loopback server, same concurrency"),
    ]
