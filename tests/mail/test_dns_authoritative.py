"""The real resolver's authoritative mode (DM-1, DM-2) when a zone's nameservers are lame: a name
server whose own name does not exist, or never answers, is passed over; a zone with no usable name
server is a lookup failure (unknown), never an answer about the domain (NXDOMAIN would fail it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mailbox_actors.core.dns.answers import TRANSIENT, Outcome, Rtype
from mailbox_actors.platform.dns.real import DnspythonResolver
from mailbox_actors.platform.dns.resolver import DnsSettings
from mailbox_actors.testing.dns import LoopbackDns

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[LoopbackDns]:
    with LoopbackDns() as s:
        yield s


def authoritative(server: LoopbackDns) -> DnspythonResolver:
    return DnspythonResolver(DnsSettings(nameservers=(server.host,), port=server.port,
                                         timeout_ms=1_000, attempts=1, authoritative=True))


async def test_a_lame_nameserver_beside_a_good_one_is_passed_over(server: LoopbackDns) -> None:
    """DM-1: the zone lists a nameserver whose name is NXDOMAIN and one that never answers its
    address question, beside its real one: the answer comes from the real one."""
    server.zone("example.com")
    server.add("example.com", "NS", "ns.gone.example", "ns.slow.example")
    server.add("slow.example", "A", "192.0.2.1")
    server.silence("ns.slow.example")
    server.add("example.com", "MX", "10 mx.example.com")
    answer = await authoritative(server).resolve("example.com", Rtype.MX)
    assert (answer.outcome, answer.records) == (Outcome.RECORDS, ("10 mx.example.com",))


async def test_a_zone_without_a_usable_nameserver_is_unknown_never_nxdomain(
        server: LoopbackDns) -> None:
    """DM-1, DM-2: every nameserver of the zone is lame (its name does not exist): the answer is a
    transient failure, which a check reads as unknown; NXDOMAIN would fail a domain that exists."""
    server.zone("lame.example")
    server.set("lame.example", "NS", "ns.gone.example")
    server.add("lame.example", "MX", "10 mx.lame.example")
    answer = await authoritative(server).resolve("lame.example", Rtype.MX)
    assert answer.outcome in TRANSIENT, answer
