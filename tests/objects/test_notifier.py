"""Notifier (OBJ-4): DomainMonitor's state events reach the tenant's Notifier by Post and become
emails to the tenant's recipients through Carrier, at most one per domain and kind per hour; the
real resolver against a DNS server on loopback, the FakeClock, a recording transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mailbox_actors.objects.notifier import notification_source
from mailbox_actors.platform.dns.resolver import DnsSettings
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.testing import RecordingTransport, TestRuntime
from mailbox_actors.testing.dns import LoopbackDns
from mailbox_actors.wire.carrier import GetEmail
from mailbox_actors.wire.domain import DomainCheck, DomainInit, ExpectedRecords
from mailbox_actors.wire.notifier import NotifierInit, NotifierStatus, SetRecipients
from mailbox_actors.wire.post import PostDeadLetters, PostRetry

pytestmark = pytest.mark.anyio

DOMAIN = "example.com"
TENANT = "t1"
KEY = "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDwIRP/UC3SBsEmGqZ9ZJW3/DkMoGeLnQg1fWn7/zYt"
EXPECTED = ExpectedRecords(spf_include="_spf.provider.net", dkim_selector="s1", dkim_key=KEY,
                           mx_hosts=["mx1.provider.net"])
HOUR = 3_600_000
SPF = "v=spf1 include:_spf.provider.net -all"


def publish(dns: LoopbackDns, spf: bool = True) -> None:
    dns.set(DOMAIN, "MX", "10 mx1.provider.net")
    dns.set(DOMAIN, "TXT", *(["google-site-verification=abc", SPF] if spf
                             else ["google-site-verification=abc"]))
    dns.set("_spf.provider.net", "TXT", "v=spf1 ip4:192.0.2.0/24 -all")
    dns.set(f"s1._domainkey.{DOMAIN}", "TXT", f"v=DKIM1; k=rsa; p={KEY}")
    dns.set(f"_dmarc.{DOMAIN}", "TXT", "v=DMARC1; p=quarantine")


@pytest.fixture
def dns() -> Iterator[LoopbackDns]:
    with LoopbackDns() as server:
        yield server


@pytest.fixture
def transport() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
async def rt(dns: LoopbackDns, transport: RecordingTransport,
             tmp_path: Path) -> AsyncIterator[TestRuntime]:
    settings = DnsSettings(nameservers=(dns.host,), port=dns.port, timeout_ms=1_000, attempts=1)
    async with TestRuntime(tmp_path / "rt", dns=settings,
                           services={MAIL_TRANSPORT: transport}) as runtime:
        yield runtime


async def notifier(rt: TestRuntime, recipients: list[str]) -> str:
    nid = rt.id_from_name("notifier", TENANT)
    await rt.call("notifier", nid, NotifierInit(), tenant_id=TENANT)
    await rt.call("notifier", nid, SetRecipients(from_="alerts@acme.example",
                                                 recipients=recipients), tenant_id=TENANT)
    return nid


async def monitor(rt: TestRuntime) -> str:
    mid = rt.id_from_name("domain_monitor", DOMAIN)
    await rt.call("domain_monitor", mid, DomainInit(domain=DOMAIN, expected=EXPECTED),
                  tenant_id=TENANT)
    await rt.run_until_idle()
    return mid


async def check(rt: TestRuntime, mid: str, times: int = 1) -> None:
    for _ in range(times):
        await rt.call("domain_monitor", mid, DomainCheck(), tenant_id=TENANT)
        await rt.run_until_idle()


async def test_a_failing_domain_sends_one_notification_with_carriers_evidence(
        rt: TestRuntime, dns: LoopbackDns, transport: RecordingTransport) -> None:
    """OBJ-4: three failed checks make the domain failing; its event reaches the Notifier by
    Post and one email goes to the tenant's recipients, its receipt readable by source id."""
    publish(dns)
    nid = await notifier(rt, ["ops@acme.example", "cto@acme.example"])
    mid = await monitor(rt)
    assert transport.sent == []  # domain.verified is not a notification
    publish(dns, spf=False)
    await check(rt, mid, 3)
    assert len(transport.sent) == 1
    sent = transport.sent[0]
    assert sent.to == ["ops@acme.example", "cto@acme.example"]
    assert sent.from_ == "alerts@acme.example"
    assert sent.subject == f"{DOMAIN} is failing its DNS checks"
    receipt = await rt.call("notifier", nid, GetEmail(
        source_id=notification_source(DOMAIN, "domain.failing", rt.now_ms())), tenant_id=TENANT)
    assert receipt["status"] == "provider_accepted"
    assert receipt["email_id"] == sent.email_id
    st = await rt.call("notifier", nid, NotifierStatus(), tenant_id=TENANT)
    assert st["notifications"] == 1 and st["coalesced"] == 0 and st["unsent"] == 0


async def test_one_notification_per_domain_and_kind_per_hour(
        rt: TestRuntime, dns: LoopbackDns, transport: RecordingTransport) -> None:
    """OBJ-4: failing, recovered and failing again within the hour send two emails (one each
    kind); the second failing is coalesced into the first; an hour later it is sent again."""
    publish(dns)
    nid = await notifier(rt, ["ops@acme.example"])
    mid = await monitor(rt)
    await rt.advance(HOUR - rt.now_ms() % HOUR)  # at the start of an hour: all of it ahead
    for _ in range(2):
        publish(dns, spf=False)
        await check(rt, mid, 3)
        publish(dns)
        await check(rt, mid)
    assert [e.subject for e in transport.sent] == [
        f"{DOMAIN} is failing its DNS checks", f"{DOMAIN} passes its DNS checks again"]
    st = await rt.call("notifier", nid, NotifierStatus(), tenant_id=TENANT)
    assert (st["notifications"], st["coalesced"]) == (2, 2)
    await rt.advance(HOUR)
    publish(dns, spf=False)
    await check(rt, mid, 3)
    assert [e.subject for e in transport.sent][-1] == f"{DOMAIN} is failing its DNS checks"
    assert len(transport.sent) == 3


async def test_a_tenant_without_a_notifier_gets_a_dead_letter_that_an_operator_retries(
        rt: TestRuntime, dns: LoopbackDns, transport: RecordingTransport) -> None:
    """OBJ-4, PO-5, PO-6: with no Notifier the event is a dead letter on the monitor; once the
    tenant sets one up, post_retry delivers it and the email goes out."""
    publish(dns)
    mid = await monitor(rt)
    publish(dns, spf=False)
    await check(rt, mid, 3)
    page = await rt.call("domain_monitor", mid, PostDeadLetters(), tenant_id=TENANT)
    assert [d["reason"] for d in page["letters"]] == ["tenant_not_found"]
    await notifier(rt, ["ops@acme.example"])
    await rt.call("domain_monitor", mid, PostRetry(key=page["letters"][0]["key"]),
                  tenant_id=TENANT)
    await rt.run_until_idle()
    assert [e.subject for e in transport.sent] == [f"{DOMAIN} is failing its DNS checks"]


async def test_no_recipients_means_no_email(rt: TestRuntime, dns: LoopbackDns,
                                            transport: RecordingTransport) -> None:
    """OBJ-4: a Notifier with no recipients set admits the event and sends nothing."""
    publish(dns)
    nid = await notifier(rt, [])
    mid = await monitor(rt)
    publish(dns, spf=False)
    await check(rt, mid, 3)
    assert transport.sent == []
    st: dict[str, Any] = await rt.call("notifier", nid, NotifierStatus(), tenant_id=TENANT)
    assert (st["notifications"], st["unsent"]) == (0, 1)


async def test_the_notifiers_deliveries_are_in_the_operators_inspection(
        rt: TestRuntime, dns: LoopbackDns, transport: RecordingTransport,
        tmp_path: Path) -> None:
    """OBJ-4, CA-10: the notification Email is in the operator's delivery inspection of the
    tenant's Notifier, read from its file (``Node.inspect_deliveries``), over HTTP behind the
    operator token and with ``mailbox-actors deliveries --namespace notifier TENANT``: its
    email id, status and evidence, no address."""
    from _carrier import OPERATOR, TOKEN, get, run_cli, serving

    (tmp_path / "cluster.token").write_text(TOKEN)
    (tmp_path / "operator.token").write_text(OPERATOR)
    publish(dns)
    nid = await notifier(rt, ["ops@acme.example"])
    mid = await monitor(rt)
    publish(dns, spf=False)
    await check(rt, mid, 3)
    [sent] = transport.sent
    page = msgspec.to_builtins(rt.node.inspect_deliveries(nid, namespace="notifier"))
    emails = [r for r in page["records"] if r["kind"] == "email"]
    assert [(r["email_id"], r["status"], r["messages"]) for r in emails] == [
        (sent.email_id, "provider_accepted", 1)]
    assert "@" not in str(page) and DOMAIN not in str(page)
    async with serving(rt) as url:
        status, over_http = await get(url, f"/admin/deliveries/notifier/{nid}", OPERATOR)
        assert (status, over_http) == (200, page)
        code, pages = await run_cli("deliveries", "--namespace", "notifier", TENANT,
                                    "--data", str(tmp_path), "--url", url)
        assert (code, pages) == (0, [page])
