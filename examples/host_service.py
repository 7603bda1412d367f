"""An example host service: creates tenants (with a webhook it serves itself) and identities in the
control database, domain monitors and quotas on a running cluster, and drives real traffic through
the project's client, printing what it does and the events its webhook receives.

    python examples/host_service.py --data ./data [--tenants 5] [--seconds 0 (forever)]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
from mail_traffic import MailStats, send_mail

from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.control_ops import create_domain, create_identity
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import configure_logging
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.webhooks.delivery import SIGNATURE_HEADER, verify
from mailbox_actors.wire.control import Identity
from mailbox_actors.wire.domain import DomainCheck, DomainStatus, ExpectedRecords
from mailbox_actors.wire.mailbox import MailboxStatus
from mailbox_actors.wire.notifier import NotifierInit, NotifierStatus, SetRecipients
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaUsage
from mailbox_actors.wire.search import SearchFilters, SearchMessages

SECRET = "example-webhook-secret-0123456789"
EXPECTED = ExpectedRecords(spf_include="_spf.provider.example", dkim_selector="s1",
                           mx_hosts=["mx1.provider.example"])


async def main(data: str, tenants: int, seconds: float, concurrency: int) -> None:
    events: dict[str, int] = {}

    async def webhook(method: str, path: str, headers: Mapping[str, str],
                      body: bytes) -> tuple[int, bytes, str]:
        if not verify(SECRET, headers.get(SIGNATURE_HEADER, ""), body, now_s=int(time.time())):
            return 401, b"{}", "application/json"
        event = json.loads(body)
        events[event["id"]] = events.get(event["id"], 0) + 1  # deduplicate on the event id
        if events[event["id"]] == 1:
            print(f"webhook: {event['type']} sequence {event['sequence']} ({event['id']})",
                  flush=True)
        return 200, b"{}", "application/json"

    receiver = RpcHttpServer(webhook)
    port = await receiver.start("127.0.0.1", 0)
    clock = SystemClock()
    # The control database the cluster uses: DATA/control.sqlite, or PostgreSQL (CL-7) when the
    # cluster runs with MAILBOX_ACTORS_POSTGRES (make run-postgres).
    dsn = os.environ.get("MAILBOX_ACTORS_POSTGRES")
    if dsn:
        from mailbox_actors.platform.control.postgres import control_on
        from mailbox_actors.platform.postgres.database import PgDatabase

        db = control_on(PgDatabase(dsn, max_size=2), clock=clock, ids=Ids(clock, SystemRng()))
    else:
        db = ControlDb(Path(data) / "control.sqlite", clock=clock, ids=Ids(clock, SystemRng()))
    async with Client.from_data_dir(data) as client, db:
        quotas: list[tuple[str, str]] = []
        senders: list[tuple[Identity, str]] = []
        known = {t.name: t for t in await db.list_tenants()}  # a second run reuses them
        hook = f"http://127.0.0.1:{port}/events"
        for t in range(tenants):
            record = known.get(f"tenant-{t}")
            if record is None:
                record = await db.create_tenant(f"tenant-{t}", webhook_url=hook,
                                                webhook_secret=SECRET)
            else:
                await db.set_webhook(record.id, hook, SECRET)
            tenant = record.id
            domain = f"tenant-{t}.example.com"
            # support@ is where the other tenants' mail to it arrives, through the SMTP door.
            identity = await create_identity(db, client, tenant, "support", [f"support@{domain}"])
            qid = await client.id_from_name("tenant_quota", tenant)
            # tenant-0 has a small quota so the output shows rate limiting; the rest are roomy.
            per_minute = 600 if t == 0 else 1_000_000
            await client.call("tenant_quota", qid,
                              QuotaInit(per_minute=per_minute, per_day=10_000_000),
                              tenant_id=tenant)
            mid = identity.mailbox_id
            status = await client.call("identity_mailbox", mid, MailboxStatus(),
                                       tenant_id=tenant, identity_id=identity.id)
            # The provider's expectations; run_cluster.py's loopback DNS serves these records, so
            # the first check (run at once by init) verifies the domain: domain.verified arrives.
            await create_domain(db, client, tenant, domain, EXPECTED)
            print(f"created {tenant}: identity {identity.id} with mailbox {mid[:12]}... "
                  f"(schema {status['schema_version']}), quota {qid[:12]}..., domain {domain}",
                  flush=True)
            quotas.append((tenant, qid))
            senders.append((identity, domain))

        await show_domains(db, client, [tenant for tenant, _ in quotas])
        zone = Path(data) / "dns-zone.json"  # run_cluster.py's loopback DNS serves this file
        if zone.exists() and len(senders) > 1:
            await notify_demo(db, client, zone, senders)

        granted = limited = errors = 0
        started = time.monotonic()
        stop_at = started + seconds if seconds > 0 else float("inf")

        async def worker(w: int) -> None:
            nonlocal granted, limited, errors
            n = 0
            while time.monotonic() < stop_at:
                tenant, qid = quotas[(w + n) % len(quotas)]
                n += 1
                try:
                    await client.call("tenant_quota", qid,
                                      QuotaReserve(key=f"w{w}-{n}-{started}"), tenant_id=tenant,
                                      idempotent=False)
                    granted += 1
                except RpcError as e:
                    if e.code.value == "rate_limited":
                        limited += 1
                        n += 1  # move on to another tenant instead of waiting
                    else:
                        errors += 1
                        print(f"error: {e.code.value}: {e.message}", file=sys.stderr, flush=True)
                        await anyio.sleep(0.2)

        async def reporter() -> None:
            last = 0
            while time.monotonic() < stop_at:
                await anyio.sleep(1)
                total = granted + limited + errors
                tenant, qid = quotas[0]
                usage = await client.call("tenant_quota", qid, QuotaUsage(), tenant_id=tenant)
                print(f"{time.monotonic() - started:6.1f}s  {total - last:6d} calls/s  "
                      f"granted {granted}  rate_limited {limited}  errors {errors}  "
                      f"tenant-0 minute {usage['minute_used']}/{usage['minute_limit']}  "
                      f"webhook events {len(events)}  mail submitted {mail.submitted} "
                      f"{mail.final}", flush=True)
                last = total

        mail = MailStats()
        async with anyio.create_task_group() as tg:
            for w in range(concurrency):
                tg.start_soon(worker, w)
            tg.start_soon(reporter)
            # tenant-0's quota fills with the workers' reservations: its mail shows a full
            # window delaying dispatch (never dropping it).
            tg.start_soon(send_mail, client, senders, mail, stop_at)
    await receiver.stop()


async def notify_demo(db: ControlDb, client: Client, zone: Path,
                      senders: list[tuple[Identity, str]]) -> None:
    """OBJ-4: tenant-0's Notifier sends to tenant-1's support address; tenant-0's domain is made
    to fail (its SPF record leaves the loopback DNS zone) and checked until it is failing; one
    notification goes out through Carrier and arrives in tenant-1's mailbox; the SPF comes back."""
    (sender, domain), (reader, reader_domain) = senders[0], senders[1]
    tenant = sender.tenant_id
    nid = await client.id_from_name("notifier", tenant)
    await client.call("notifier", nid, NotifierInit(), tenant_id=tenant)
    await client.call("notifier", nid, SetRecipients(
        from_=f"alerts@{domain}", recipients=[f"support@{reader_domain}"]), tenant_id=tenant)
    monitor = next(d for d in await db.list_domains(tenant) if d.name == domain).monitor_id
    await client.call("domain_monitor", monitor, DomainCheck(), tenant_id=tenant)  # verified
    await anyio.sleep(0.5)  # a recovery of an earlier run's failure reaches the Notifier first
    before = await client.call("notifier", nid, NotifierStatus(), tenant_id=tenant)
    seen = before["notifications"] + before["coalesced"] + before["unsent"]
    doc = json.loads(await anyio.Path(zone).read_text())
    spf = [r for r in doc["records"] if r[0] == domain and r[1] == "TXT"]
    await anyio.Path(zone).write_text(
        json.dumps({**doc, "records": [r for r in doc["records"] if r not in spf]}))
    print(f"notifier: {domain} loses its SPF record; checking it until it is failing", flush=True)
    try:
        await anyio.sleep(0.5)  # the loopback DNS reads its zone file again
        state = "verified"
        for _ in range(10):
            check = await client.call("domain_monitor", monitor, DomainCheck(), tenant_id=tenant)
            state = check["state"]
            if state == "failing":
                break
        status: dict[str, Any] = {}
        for _ in range(200):  # Post delivers the event, Carrier sends the email: a moment
            status = await client.call("notifier", nid, NotifierStatus(), tenant_id=tenant)
            if status["notifications"] + status["coalesced"] + status["unsent"] > seen:
                break
            await anyio.sleep(0.1)
        print(f"notifier: {domain} is {state}; notifications sent {status.get('notifications')}"
              f", coalesced {status.get('coalesced')} (one email a domain and kind an hour)",
              flush=True)
        ids = {"tenant_id": reader.tenant_id, "identity_id": reader.id}
        for _ in range(200):  # the door takes it in and indexes it: a moment more
            found = await client.call("identity_mailbox", reader.mailbox_id, SearchMessages(
                query="failing", filters=SearchFilters(from_=f"alerts@{domain}")), **ids)
            if found["messages"]:
                hit = found["messages"][0]
                print(f"notifier: arrived at support@{reader_domain}: \"{hit['subject']}\"",
                      flush=True)
                break
            await anyio.sleep(0.1)
    finally:
        await anyio.Path(zone).write_text(json.dumps(doc))  # the SPF is back: the next check recovers


async def show_domains(db: ControlDb, client: Client, tenants: list[str]) -> None:
    """Each tenant's domain state, per record, after its first check (a few seconds at most)."""
    deadline = time.monotonic() + 10
    for tenant in tenants:
        for d in await db.list_domains(tenant):
            st = await client.call("domain_monitor", d.monitor_id, DomainStatus(),
                                   tenant_id=tenant)
            while not st["results"] and time.monotonic() < deadline:
                await anyio.sleep(0.1)  # the first check is an alarm: it runs right after init
                st = await client.call("domain_monitor", d.monitor_id, DomainStatus(),
                                       tenant_id=tenant)
            records = ", ".join(f"{r['record']} {r['verdict']}" for r in st["results"])
            print(f"domain {d.name}: {st['state']} ({records or 'not checked yet'})", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default="./data")
    p.add_argument("--tenants", type=int, default=5)
    p.add_argument("--seconds", type=float, default=0)
    p.add_argument("--concurrency", type=int, default=16)
    a = p.parse_args()
    configure_logging(level="warning")
    try:
        anyio.run(main, a.data, a.tenants, a.seconds, a.concurrency)
    except KeyboardInterrupt:
        print("host service stopped", flush=True)
