"""DomainMonitor (OBJ-3, DM-1..DM-5) end to end: the real resolver against a DNS server on loopback
that each test starts and stops, the FakeClock driving ``alarm:check``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mailbox_actors.core.dns.answers import Rtype
from mailbox_actors.node.control_ops import create_domain
from mailbox_actors.platform.dns.resolver import RESOLVER, DnsSettings
from mailbox_actors.testing import FakeResolver, TestRuntime
from mailbox_actors.testing.dns import LoopbackDns
from mailbox_actors.wire.domain import DomainCheck, DomainInit, DomainStatus, ExpectedRecords
from mailbox_actors.wire.errors import MailboxActorsError

pytestmark = pytest.mark.anyio

DOMAIN = "example.com"
KEY = "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDwIRP/UC3SBsEmGqZ9ZJW3/DkMoGeLnQg1fWn7/zYt"
EXPECTED = ExpectedRecords(spf_include="_spf.provider.net", dkim_selector="s1", dkim_key=KEY,
                           mx_hosts=["mx1.provider.net"])
HOUR = 3_600_000
DAY = 24 * HOUR
PENDING_MS = 300_000


def publish(dns: LoopbackDns, domain: str = DOMAIN) -> None:
    """Every record the provider asks for, correct."""
    dns.set(domain, "MX", "10 mx1.provider.net", "20 mx2.provider.net")
    dns.set(domain, "TXT", "google-site-verification=abc", "v=spf1 include:_spf.provider.net -all")
    dns.set("_spf.provider.net", "TXT", "v=spf1 ip4:192.0.2.0/24 -all")
    dns.set(f"s1._domainkey.{domain}", "CNAME", "s1.keys.provider.net")
    dns.set("s1.keys.provider.net", "TXT", f"v=DKIM1; k=rsa; p={KEY}")
    dns.set(f"_dmarc.{domain}", "TXT", "v=DMARC1; p=quarantine; rua=mailto:r@example.com; junk")


@pytest.fixture
def dns() -> Iterator[LoopbackDns]:
    with LoopbackDns() as server:
        yield server


@pytest.fixture
async def rt(dns: LoopbackDns, tmp_path: Path) -> AsyncIterator[TestRuntime]:
    settings = DnsSettings(nameservers=(dns.host,), port=dns.port, timeout_ms=1_000, attempts=1)
    async with TestRuntime(tmp_path / "rt", dns=settings) as runtime:
        yield runtime


async def init(rt: TestRuntime, domain: str = DOMAIN,
               expected: ExpectedRecords = EXPECTED) -> str:
    mid = rt.id_from_name("domain_monitor", domain)
    await rt.call("domain_monitor", mid, DomainInit(domain=domain, expected=expected),
                  tenant_id="t1")
    await rt.run_until_idle()  # the first check runs at once
    return mid


async def status(rt: TestRuntime, mid: str) -> dict[str, Any]:
    st: dict[str, Any] = await rt.call("domain_monitor", mid, DomainStatus(), tenant_id="t1")
    return st


def codes(st: dict[str, Any]) -> dict[str, str]:
    return {r["record"]: r["code"] for r in st["results"]}


def events(rt: TestRuntime) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.data) for e in rt.events.events("domain.")]


async def test_a_domain_with_correct_records_verifies(rt: TestRuntime, dns: LoopbackDns) -> None:
    """DM-1, DM-2, DM-4, DM-5: with every record published, the first check (run at init) passes
    MX, SPF, DKIM (through a CNAME, the expected key) and DMARC (junk tags tolerated), the domain
    is verified with domain.verified (ids and states only), and the next check is a day away."""
    publish(dns)
    mid = await init(rt)
    st = await status(rt, mid)
    assert st["state"] == "verified"
    assert codes(st) == {"mx": "mx_ok", "spf": "spf_ok", "dkim": "dkim_ok", "dmarc": "dmarc_ok"}
    assert st["next_check_ms"] == rt.now_ms() + DAY
    assert st["last_checks"][0]["verdict"] == "pass"
    assert events(rt) == [("domain.created", {"state": "pending"}),
                          ("domain.verified", {"state": "verified", "previous_state": "pending"})]


async def test_a_pending_domain_is_checked_every_few_minutes_until_it_verifies(
        rt: TestRuntime, dns: LoopbackDns) -> None:
    """DM-3: a domain whose records are not there yet stays pending, is checked every
    domain_check_pending_ms, and verifies at the first check after the records appear."""
    mid = await init(rt)
    st = await status(rt, mid)
    assert st["state"] == "pending" and codes(st)["mx"] == "domain_not_found"
    assert st["next_check_ms"] == rt.now_ms() + PENDING_MS
    publish(dns)
    await rt.advance(PENDING_MS)
    assert (await status(rt, mid))["state"] == "verified"


async def test_a_removed_record_fails_the_domain_only_after_n_checks_and_recovers(
        rt: TestRuntime, dns: LoopbackDns) -> None:
    """DM-3, DM-4: after a record is removed, a verified domain stays verified for N-1 failed
    checks (N = domain_fail_after, 3), becomes failing at the Nth with domain.failing, and
    recovers with domain.recovered at the first check after the record is back."""
    publish(dns)
    mid = await init(rt)
    dns.remove(f"_dmarc.{DOMAIN}")
    await rt.advance(DAY)  # the daily check: first failure
    st = await status(rt, mid)
    assert (st["state"], st["consecutive_failures"]) == ("verified", 1)
    assert codes(st)["dmarc"] == "dmarc_missing"
    await rt.advance(PENDING_MS)  # checked again soon while in doubt: second failure
    assert (await status(rt, mid))["state"] == "verified"
    await rt.advance(PENDING_MS)
    st = await status(rt, mid)
    assert (st["state"], st["consecutive_failures"]) == ("failing", 3)
    assert [t for t, _ in events(rt)][-1] == "domain.failing"
    publish(dns)
    await rt.advance(PENDING_MS)
    st = await status(rt, mid)
    assert (st["state"], st["consecutive_failures"]) == ("verified", 0)
    assert events(rt)[-1] == ("domain.recovered", {"state": "verified",
                                                   "previous_state": "failing"})


async def test_a_subdomain_without_dmarc_takes_its_organizational_domains_policy(
        rt: TestRuntime, dns: LoopbackDns) -> None:
    """DM-2, RFC 7489 6.6.3: a subdomain with every record but DMARC verifies on the DMARC record
    of its organizational domain (from the Public Suffix List: news.example.co.uk's is
    example.co.uk); once that one is removed too, DMARC is missing at both names."""
    sub = "news.example.co.uk"
    publish(dns, sub)
    dns.remove(f"_dmarc.{sub}")
    dns.set("_dmarc.example.co.uk", "TXT", "v=DMARC1; p=reject")
    mid = await init(rt, sub)
    st = await status(rt, mid)
    assert st["state"] == "verified" and codes(st)["dmarc"] == "dmarc_ok"
    assert "_dmarc.example.co.uk" in next(r["message"] for r in st["results"]
                                          if r["record"] == "dmarc")
    dns.remove("_dmarc.example.co.uk")
    st = msgspec.to_builtins(await rt.call("domain_monitor", mid, DomainCheck(), tenant_id="t1"))
    assert codes(st)["dmarc"] == "dmarc_missing"


async def test_timeouts_and_garbage_never_fail_a_domain(rt: TestRuntime, dns: LoopbackDns) -> None:
    """DM-1, DM-2, DM-3: while the nameserver never answers, or answers garbage or SERVFAIL, every
    check is unknown (dns_timeout, dns_servfail): a verified domain stays verified with no failure
    counted through many more checks than domain_fail_after, and nothing raises out of the alarm."""
    publish(dns)
    mid = await init(rt)
    for name in (DOMAIN, f"_dmarc.{DOMAIN}", f"s1._domainkey.{DOMAIN}"):
        dns.silence(name)
    await rt.advance(DAY)
    for _ in range(4):
        await rt.advance(PENDING_MS)
    st = await status(rt, mid)
    assert (st["state"], st["consecutive_failures"]) == ("verified", 0)
    assert set(codes(st).values()) == {"dns_timeout"}
    assert all(r["verdict"] == "unknown" for r in st["results"])
    assert len(st["last_checks"]) == 6
    for name in (DOMAIN, f"_dmarc.{DOMAIN}", f"s1._domainkey.{DOMAIN}"):
        dns.heal(name)
    dns.garble(DOMAIN)
    dns.servfail(f"_dmarc.{DOMAIN}")
    await rt.advance(PENDING_MS)
    st = await status(rt, mid)
    assert st["state"] == "verified" and codes(st)["dmarc"] == "dns_servfail"
    assert codes(st)["mx"] in ("dns_timeout", "dns_error")
    assert [t for t, _ in events(rt)] == ["domain.created", "domain.verified"]


async def test_a_domain_that_never_verifies_fails_after_72_hours(
        dns: LoopbackDns, tmp_path: Path) -> None:
    """DM-3, DM-4: a pending domain whose records never pass (checked hourly here) becomes failed
    exactly at 72 h after init (domain.failed), and its periodic checks stop; a manual check that
    passes verifies it."""
    dns.set(DOMAIN, "MX", "10 mx1.provider.net")
    settings = DnsSettings(nameservers=(dns.host,), port=dns.port, timeout_ms=1_000, attempts=1)
    async with TestRuntime(tmp_path, dns=settings, domain_check_pending_ms=HOUR) as rt:
        await _never_verifies(rt, dns)


async def _never_verifies(rt: TestRuntime, dns: LoopbackDns) -> None:
    mid = await init(rt)
    start = rt.now_ms()
    await rt.advance(72 * HOUR - 1)
    assert (await status(rt, mid))["state"] == "pending"
    await rt.advance(1)
    st = await status(rt, mid)
    assert st["state"] == "failed" and st["next_check_ms"] is None
    assert st["last_checks"][0]["at_ms"] == start + 72 * HOUR
    assert events(rt)[-1] == ("domain.failed", {"state": "failed", "previous_state": "pending"})
    await rt.advance(7 * DAY)
    assert (await status(rt, mid))["last_checks"][0]["at_ms"] == start + 72 * HOUR
    publish(dns)
    reply = await rt.call("domain_monitor", mid, DomainCheck(), tenant_id="t1")
    assert (reply["state"], reply["verdict"]) == ("verified", "pass")


async def test_changed_expectations_are_checked_at_once(rt: TestRuntime, dns: LoopbackDns
                                                        ) -> None:
    """DM-5: a repeated init with other expected records checks the domain again at once against
    them (the last results answered the old ones); one with the same records changes nothing."""
    publish(dns)
    mid = await init(rt)
    assert (await status(rt, mid))["state"] == "verified"
    runs = len((await status(rt, mid))["last_checks"])
    await init(rt, expected=EXPECTED)
    assert len((await status(rt, mid))["last_checks"]) == runs
    other = ExpectedRecords(spf_include="_spf.other-provider.net", mx_hosts=["mx9.provider.net"])
    await init(rt, expected=other)
    st = await status(rt, mid)
    assert len(st["last_checks"]) == runs + 1
    assert codes(st)["spf"] == "spf_include_missing" and codes(st)["mx"] == "mx_host_missing"
    assert st["consecutive_failures"] == 1 and st["state"] == "verified"  # hysteresis holds


async def test_spf_loops_and_bad_records_are_verdicts_with_a_diagnosis(
        rt: TestRuntime, dns: LoopbackDns) -> None:
    """DM-2: an SPF include loop, an oversize DKIM record and a DMARC record without a policy are
    each a failed record with its code (the domain stays pending), never an error."""
    publish(dns)
    dns.set(DOMAIN, "TXT", "v=spf1 include:a.example.net -all")
    dns.set("a.example.net", "TXT", "v=spf1 include:b.example.net")
    dns.set("b.example.net", "TXT", "v=spf1 include:a.example.net")
    dns.set("s1.keys.provider.net", "TXT", "v=DKIM1; p=" + "A" * 5000)
    dns.set(f"_dmarc.{DOMAIN}", "TXT", "v=DMARC1; sp=reject")
    mid = await init(rt)
    st = await status(rt, mid)
    assert st["state"] == "pending"
    assert codes(st) == {"mx": "mx_ok", "spf": "spf_include_loop", "dkim": "dkim_too_large",
                         "dmarc": "dmarc_no_policy"}
    assert all(r["message"] for r in st["results"])


async def test_init_normalises_idna_and_refuses_what_is_not_a_domain(rt: TestRuntime) -> None:
    """DM-5: init stores a U-label domain as its A-label; a non-domain, a bad IDNA label, a bad
    expected host, selector or key are invalid_request; another domain for the same monitor is
    conflict; a monitor never initialised is domain_not_found."""
    mid = rt.id_from_name("domain_monitor", "idn")
    with pytest.raises(MailboxActorsError) as e:
        await rt.call("domain_monitor", mid, DomainStatus(), tenant_id="t1")
    assert e.value.code == "domain_not_found"
    bad: list[dict[str, Any]] = [
        {"domain": "not a domain"}, {"domain": "localhost"}, {"domain": "xn--zz.example"},
        {"domain": "a" * 64 + ".com"}, {"domain": "x.com", "expected": {"spf_include": "no"}},
        {"domain": "x.com", "expected": {"dkim_selector": "a b"}},
        {"domain": "x.com", "expected": {"dkim_selector": "s", "dkim_key": "not base64!"}},
        {"domain": "x.com", "expected": {"dkim_key": "AAAA"}},
        {"domain": "x.com", "expected": {"mx_hosts": ["-bad-.com"]}},
        {"domain": "x.com", "expected": {"surprise": 1}}]
    for req in bad:
        env = {"v": 1, "tenant_id": "t1", "identity_id": None, "request_id": "req_01TESTTESTTEST",
               "actor_key_id": None, "deadline_ms": rt.now_ms() + 10_000,
               "req": {"op": "init"} | req}
        reply = msgspec.json.decode(await rt.call_bytes("domain_monitor", mid,
                                                        msgspec.json.encode(env)))
        assert reply["err"]["code"] == "invalid_request", req
    await rt.call("domain_monitor", mid, DomainInit(domain="Bücher.Example."), tenant_id="t1")
    assert (await status(rt, mid))["domain"] == "xn--bcher-kva.example"
    with pytest.raises(MailboxActorsError) as e:
        await rt.call("domain_monitor", mid, DomainInit(domain="other.org"), tenant_id="t1")
    assert e.value.code == "conflict"


async def test_a_resolver_that_raises_still_answers_unknown(tmp_path: Path) -> None:
    """DM-2, DM-3: a resolver that breaks its contract and raises makes every record unknown;
    the alarm re-arms and the state does not move."""
    class Broken(FakeResolver):
        async def resolve(self, name: str, rtype: Rtype) -> Any:
            raise OSError("boom")

    async with TestRuntime(tmp_path, services={RESOLVER: Broken()}) as rt:
        mid = await init(rt)
        st = await status(rt, mid)
        assert st["state"] == "pending" and {r["code"] for r in st["results"]} == {"dns_error"}
        assert st["next_check_ms"] == rt.now_ms() + PENDING_MS


async def test_the_control_databases_domain_row_follows_the_state(
        dns: LoopbackDns, tmp_path: Path) -> None:
    """DM-4: a domain registered through the control database (a new monitor id, init) moves
    its domains row from pending to verified once domain.verified is dispatched, and to failing
    after N failed checks."""
    publish(dns)
    settings = DnsSettings(nameservers=(dns.host,), port=dns.port, timeout_ms=1_000, attempts=1)
    async with TestRuntime(tmp_path, control=True, dns=settings, domain_fail_after=1) as rt:
        db = rt.node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        d = await create_domain(db, rt.node, tenant.id, "Example.com", EXPECTED)
        assert (d.name, d.state) == (DOMAIN, "pending")
        await rt.run_until_idle()
        row = await db.get_domain_by_name(DOMAIN)
        assert row is not None and row.state == "verified" and row.state_at_ms == rt.now_ms()
        dns.remove(DOMAIN, "MX")
        await rt.advance(DAY)
        row = await db.get_domain_by_name(DOMAIN)
        assert row is not None and row.state == "failing"
        with pytest.raises(MailboxActorsError) as e:
            await create_domain(db, rt.node, tenant.id, "not a domain")
        assert e.value.code == "invalid_request"


async def test_a_refused_registration_leaves_no_domain_row(tmp_path: Path) -> None:
    """DM-5: expected records init would refuse (a DKIM key without its selector) are refused
    before the control database is written: the name stays free, so another tenant's add works
    (never conflict with a monitor that never started)."""
    async with TestRuntime(tmp_path, control=True) as rt:
        db = rt.node.control_db
        assert db is not None
        acme, other = await db.create_tenant("acme"), await db.create_tenant("other")
        with pytest.raises(MailboxActorsError) as e:
            await create_domain(db, rt.node, acme.id, DOMAIN, ExpectedRecords(dkim_key=KEY))
        assert (e.value.code, e.value.details) == ("invalid_request",
                                                   {"field": "expected.dkim_selector"})
        assert await db.get_domain_by_name(DOMAIN) is None
        d = await create_domain(db, rt.node, other.id, DOMAIN, EXPECTED)
        assert d.tenant_id == other.id


async def test_every_hostile_zone_is_checked_end_to_end_without_an_error(
        dns: LoopbackDns, tmp_path: Path) -> None:
    """DM-1, DM-2, DM-5: each hand-written hostile zone of tests/support/hostile_dns.py, served by the
    loopback DNS server and read by the real resolver, gives the monitor a verdict per record with
    a code and a message (status and check answer ok; nothing raises out of the check)."""
    from hostile_dns import HAND_WRITTEN, INCLUDE, with_base

    settings = DnsSettings(nameservers=(dns.host,), port=dns.port, timeout_ms=300, attempts=1)
    async with TestRuntime(tmp_path, dns=settings) as rt:
        for case, zone in sorted(HAND_WRITTEN.items()):
            dns.remove(DOMAIN)
            for name in {n for n, _, _ in with_base(zone)} | {f"_dmarc.{DOMAIN}",
                                                            f"s1._domainkey.{DOMAIN}"}:
                dns.remove(name)
            for name, rtype, value in with_base(zone):
                dns.add(name, rtype, value)
            mid = rt.id_from_name("domain_monitor", case)
            await rt.call("domain_monitor", mid, DomainInit(domain=DOMAIN, expected=ExpectedRecords(
                spf_include=INCLUDE, dkim_selector="s1", mx_hosts=["mx1.provider.net"])),
                tenant_id="t1")
            reply = await rt.call("domain_monitor", mid, DomainCheck(), tenant_id="t1")
            assert {r["record"] for r in reply["results"]} == {"mx", "spf", "dkim", "dmarc"}, case
            assert all(r["code"] and r["message"] for r in reply["results"]), case
            st = await status(rt, mid)
            assert st["state"] in ("pending", "verified") and len(st["results"]) == 4, case


async def test_a_manual_check_ends_within_its_request_deadline(dns: LoopbackDns,
                                                               tmp_path: Path) -> None:
    """DM-2, DM-5 (RPC-5): with nameservers that never answer and resolver timeouts longer than
    the request's deadline, ``check`` still answers ok before the deadline: what did not come back
    in time is unknown (dns_timeout), and the state does not move."""
    publish(dns)
    for name in (DOMAIN, f"_dmarc.{DOMAIN}", f"s1._domainkey.{DOMAIN}"):
        dns.silence(name)
    settings = DnsSettings(nameservers=(dns.host,), port=dns.port, timeout_ms=5_000, attempts=3)
    async with TestRuntime(tmp_path, dns=settings) as rt:
        mid = rt.id_from_name("domain_monitor", DOMAIN)
        await rt.call("domain_monitor", mid, DomainInit(domain=DOMAIN, expected=EXPECTED),
                      tenant_id="t1")
        reply = await rt.call("domain_monitor", mid, DomainCheck(), tenant_id="t1",
                              deadline_ms=rt.now_ms() + 1_000)
        assert reply["state"] == "pending" and reply["verdict"] == "unknown"
        assert {r["code"] for r in reply["results"]} == {"dns_timeout"}
        assert all("deadline" in r["message"] for r in reply["results"])


async def test_a_pending_domain_whose_dns_never_answers_is_not_failed_at_72_hours(
        dns: LoopbackDns, tmp_path: Path) -> None:
    """DM-2, DM-3: a pending domain whose nameserver times out on every question through the
    72 h expiry (checked every 6 hours here: each check waits out its questions' timeouts in real
    time) stays pending with dns_timeout results, still checked; the first run that reads a
    definite failure after the expiry fails it (domain.failed)."""
    for name in (DOMAIN, f"_dmarc.{DOMAIN}", f"s1._domainkey.{DOMAIN}"):
        dns.silence(name)
    settings = DnsSettings(nameservers=(dns.host,), port=dns.port, timeout_ms=20, attempts=1)
    async with TestRuntime(tmp_path, dns=settings, domain_check_pending_ms=6 * HOUR) as rt:
        mid = await init(rt)
        await rt.advance(79 * HOUR)  # checks at 72 h and 78 h, past the expiry, time out too
        st = await status(rt, mid)
        assert st["state"] == "pending" and set(codes(st).values()) == {"dns_timeout"}
        assert st["next_check_ms"] is not None
        for name in (DOMAIN, f"_dmarc.{DOMAIN}", f"s1._domainkey.{DOMAIN}"):
            dns.heal(name)  # the names now answer NXDOMAIN: a definite failure
        # On a loaded machine a healed answer can still miss the 20 ms timeout: that check read
        # no definite failure (a question timed out), so the domain rightly stays pending for it.
        for _ in range(20):
            await rt.advance(6 * HOUR)
            st = await status(rt, mid)
            if st["state"] != "pending":
                break
            assert "dns_timeout" in set(codes(st).values()), st
        assert st["state"] == "failed"
        assert events(rt)[-1] == ("domain.failed", {"state": "failed", "previous_state": "pending"})
