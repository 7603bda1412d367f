"""The resolver (DM-1): dnspython against a DNS server on loopback, and the fake, tested itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mailbox_actors.core.dns.answers import MAX_RECORD_CHARS, Outcome, Rtype
from mailbox_actors.platform.dns.fake import FakeResolver
from mailbox_actors.platform.dns.real import DnspythonResolver
from mailbox_actors.platform.dns.resolver import DnsSettings
from mailbox_actors.testing.dns import LoopbackDns

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[LoopbackDns]:
    with LoopbackDns() as s:
        yield s


def resolver(server: LoopbackDns, **kw: object) -> DnspythonResolver:
    return DnspythonResolver(DnsSettings(nameservers=(server.host,), port=server.port,
                                         timeout_ms=1_000, attempts=2, **kw))  # type: ignore[arg-type]


async def test_records_nxdomain_and_nodata_are_distinct_answers(server: LoopbackDns) -> None:
    """DM-1: the real resolver answers MX, TXT (strings joined), A and AAAA records, NXDOMAIN for
    a name that does not exist and NODATA for one without records of the type."""
    server.add("example.com", "MX", "10 mx1.example.com", "0 .")
    server.add("example.com", "TXT", "v=spf1 -all")
    server.add("example.com", "A", "192.0.2.1")
    server.add("example.com", "AAAA", "2001:db8::1")
    r = resolver(server)
    mx = await r.resolve("example.com", Rtype.MX)
    assert (mx.outcome, sorted(mx.records)) == (Outcome.RECORDS, ["0 .", "10 mx1.example.com"])
    assert (await r.resolve("example.com", Rtype.TXT)).records == ("v=spf1 -all",)
    assert (await r.resolve("example.com", Rtype.A)).records == ("192.0.2.1",)
    assert (await r.resolve("example.com", Rtype.AAAA)).records == ("2001:db8::1",)
    assert (await r.resolve("nope.example.com", Rtype.TXT)).outcome is Outcome.NXDOMAIN
    assert (await r.resolve("example.com", Rtype.NS)).outcome is Outcome.NODATA
    await r.aclose()


async def test_a_truncated_udp_reply_is_asked_again_over_tcp(server: LoopbackDns) -> None:
    """DM-1: an answer over 512 bytes comes truncated over UDP; the resolver falls back to TCP and
    returns the whole record (its 255-byte strings joined)."""
    long = "v=spf1 " + " ".join(f"ip4:192.0.2.{i}" for i in range(60)) + " -all"
    assert len(long) > 512
    server.add("big.example.com", "TXT", long)
    a = await resolver(server).resolve("big.example.com", Rtype.TXT)
    assert a.records == (long,) and server.tcp_questions == 1


async def test_a_cname_chain_is_followed_and_reported(server: LoopbackDns) -> None:
    """DM-1: a TXT question at a CNAME answers the target's records and names the target."""
    server.add("s1._domainkey.example.com", "CNAME", "s1.keys.provider.net")
    server.add("s1.keys.provider.net", "TXT", "v=DKIM1; p=abc")
    a = await resolver(server).resolve("s1._domainkey.example.com", Rtype.TXT)
    assert (a.records, a.canonical_name) == (("v=DKIM1; p=abc",), "s1.keys.provider.net")


async def test_silence_servfail_and_garbage_are_answers_never_exceptions(
        server: LoopbackDns) -> None:
    """DM-1: a name that never answers is TIMEOUT (within timeout x attempts), SERVFAIL is
    SERVFAIL, a reply that is not DNS is TIMEOUT or ERROR, and a name over DNS's sizes is ERROR."""
    server.silence("slow.example.com")
    server.servfail("broken.example.com")
    server.garble("junk.example.com")
    r = resolver(server)
    assert (await r.resolve("slow.example.com", Rtype.TXT)).outcome is Outcome.TIMEOUT
    assert (await r.resolve("broken.example.com", Rtype.MX)).outcome is Outcome.SERVFAIL
    assert (await r.resolve("junk.example.com", Rtype.TXT)).outcome in (Outcome.TIMEOUT,
                                                                        Outcome.ERROR)
    assert (await r.resolve("a" * 64 + ".com", Rtype.TXT)).outcome is Outcome.ERROR
    assert (await r.resolve("x." * 130 + "com", Rtype.TXT)).outcome is Outcome.ERROR


async def test_answers_over_the_caps_are_oversize(server: LoopbackDns) -> None:
    """DM-1: a TXT record longer than the cap, or more records than the cap, is OVERSIZE (not
    handed to a check)."""
    server.add("huge.example.com", "TXT", "x" * (MAX_RECORD_CHARS + 1))
    server.add("many.example.com", "A", *(f"192.0.2.{i}" for i in range(1, 70)))
    r = resolver(server)
    assert (await r.resolve("huge.example.com", Rtype.TXT)).outcome is Outcome.OVERSIZE
    assert (await r.resolve("many.example.com", Rtype.A)).outcome is Outcome.OVERSIZE


async def test_authoritative_mode_asks_the_zones_own_nameservers(server: LoopbackDns) -> None:
    """DM-1: with authoritative=True the resolver finds the zone (SOA), its NS and their
    addresses, and asks them: the answer is the zone's, and more questions were asked to get it."""
    server.zone("example.com")
    server.add("example.com", "MX", "10 mx.example.com")
    r = resolver(server, authoritative=True)
    before = server.questions
    assert (await r.resolve("example.com", Rtype.MX)).records == ("10 mx.example.com",)
    assert server.questions - before >= 3  # SOA, NS, the nameserver's address, then MX


async def test_the_fake_answers_its_table_scripts_and_records_questions() -> None:
    """DM-1: the fake answers NXDOMAIN for unknown names, the records or outcome set for a name,
    scripted answers once each in order before the standing one, and records every question."""
    f = FakeResolver()
    assert (await f.resolve("x.com", Rtype.MX)).outcome is Outcome.NXDOMAIN
    f.set("x.com", Rtype.MX, ["10 mx.x.com"])
    f.set("x.com", Rtype.TXT, [])
    f.script("x.com", Rtype.MX, Outcome.TIMEOUT, ["20 other.x.com"])
    assert (await f.resolve("X.com", Rtype.MX)).outcome is Outcome.TIMEOUT
    assert (await f.resolve("x.com", Rtype.MX)).records == ("20 other.x.com",)
    assert (await f.resolve("x.com", Rtype.MX)).records == ("10 mx.x.com",)
    assert (await f.resolve("x.com", Rtype.TXT)).outcome is Outcome.NODATA
    f.remove("x.com", Rtype.MX)
    assert (await f.resolve("x.com", Rtype.MX)).outcome is Outcome.NXDOMAIN
    assert f.queries[0] == ("x.com", Rtype.MX) and len(f.queries) == 6
    await f.aclose()
    with pytest.raises(RuntimeError):
        await f.resolve("x.com", Rtype.MX)
