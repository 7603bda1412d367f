"""An example host service: creates tenants, mailboxes and domain monitors on a running cluster and
drives real traffic through the project's client, printing what it does.

    python examples/host_service.py --data ./data [--tenants 5] [--seconds 0 (forever)]
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio

from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.wire.domain import DomainInit
from mailbox_actors.wire.mailbox import MailboxInit, MailboxStatus
from mailbox_actors.wire.quota import QuotaInit, QuotaReserve, QuotaUsage


async def main(data: str, tenants: int, seconds: float, concurrency: int) -> None:
    async with Client.from_data_dir(data) as client:
        quotas: list[tuple[str, str]] = []
        for t in range(tenants):
            tenant = f"tenant-{t}"
            qid = await client.id_from_name("tenant_quota", tenant)
            # tenant-0 has a small quota so the output shows rate limiting; the rest are roomy.
            per_minute = 600 if t == 0 else 1_000_000
            await client.call("tenant_quota", qid,
                              QuotaInit(per_minute=per_minute, per_day=10_000_000),
                              tenant_id=tenant)
            mid = await client.new_unique_id("identity_mailbox")
            await client.call("identity_mailbox", mid, MailboxInit(), tenant_id=tenant,
                              identity_id=f"idt-{t}")
            status = await client.call("identity_mailbox", mid, MailboxStatus(),
                                       tenant_id=tenant, identity_id=f"idt-{t}")
            did = await client.id_from_name("domain_monitor", f"{tenant}.example.com")
            await client.call("domain_monitor", did, DomainInit(domain=f"{tenant}.example.com"),
                              tenant_id=tenant)
            print(f"created {tenant}: quota {qid[:12]}..., mailbox {mid[:12]}... "
                  f"(schema {status['schema_version']}), domain {tenant}.example.com", flush=True)
            quotas.append((tenant, qid))

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
                      f"{tenant} minute {usage['minute_used']}/{usage['minute_limit']}",
                      flush=True)
                last = total

        async with anyio.create_task_group() as tg:
            for w in range(concurrency):
                tg.start_soon(worker, w)
            tg.start_soon(reporter)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default="./data")
    p.add_argument("--tenants", type=int, default=5)
    p.add_argument("--seconds", type=float, default=0)
    p.add_argument("--concurrency", type=int, default=16)
    a = p.parse_args()
    try:
        anyio.run(main, a.data, a.tenants, a.seconds, a.concurrency)
    except KeyboardInterrupt:
        print("host service stopped", flush=True)
