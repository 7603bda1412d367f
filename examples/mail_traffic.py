"""The example host service's mail: each tenant's support identity sends an Email every few
seconds through its IdentityMailbox (the cluster's SMTP transport relays it to the loopback sink
``run_cluster.py`` started), follows each receipt to its final status, and applies a delivery
event to every accepted Message, printing what it sees.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.wire.carrier import ApplyDeliveryEvent, GetEmail, Submit
from mailbox_actors.wire.control import Identity

__all__ = ["MailStats", "send_mail"]

_MOVING = ("queued", "dispatching")


class MailStats:
    def __init__(self) -> None:
        self.submitted = 0
        self.final: dict[str, int] = {}


async def _follow(client: Client, who: Identity, source_id: str, receipt: dict[str, Any],
                  stats: MailStats) -> None:
    path, t0 = [receipt["status"]], time.monotonic()
    while receipt["status"] in _MOVING and time.monotonic() - t0 < 180:
        await anyio.sleep(0.05)
        receipt = await client.call("identity_mailbox", who.mailbox_id,
                                    GetEmail(source_id=source_id), tenant_id=who.tenant_id,
                                    identity_id=who.id)
        if receipt["status"] != path[-1]:
            path.append(receipt["status"])
    stats.final[receipt["status"]] = stats.final.get(receipt["status"], 0) + 1
    evidence = receipt["provider_message_id"] or receipt["provider_rejection"]
    print(f"mail {receipt['email_id']}: {' -> '.join(path)} in "
          f"{(time.monotonic() - t0) * 1000:.0f} ms (attempts {receipt['attempts']}, "
          f"evidence {evidence})", flush=True)
    if receipt["status"] == "provider_accepted":
        message = receipt["messages"][0]["message_id"]
        done = await client.call("identity_mailbox", who.mailbox_id, ApplyDeliveryEvent(
            type="delivered", message_id=message, provider_event_id=f"dlv-{message}"),
            tenant_id=who.tenant_id, identity_id=who.id)
        print(f"mail {receipt['email_id']}: delivery event 'delivered' for {message} -> "
              f"{done['status']}", flush=True)


async def send_mail(client: Client, senders: list[tuple[Identity, str]], stats: MailStats,
                    stop_at: float, every_s: float = 3.0) -> None:
    """Every ``every_s``, one Email from each (identity, its domain); each followed in its own
    task until it is final."""
    run = f"{time.time():.0f}"
    async with anyio.create_task_group() as tg:
        n = 0
        while time.monotonic() < stop_at:
            for who, domain in senders:
                n += 1
                source_id = f"hello-{run}-{n}"
                try:
                    receipt = await client.call(
                        "identity_mailbox", who.mailbox_id,
                        Submit(source_id=source_id, from_=f"support@{domain}",
                               to=[f"customer-{n}@example.net"], subject=f"Hello #{n}",
                               text=f"This is message {n} from {domain}."),
                        tenant_id=who.tenant_id, identity_id=who.id)
                except RpcError as e:
                    print(f"mail: submit failed: {e.code.value}: {e.message}", flush=True)
                    continue
                stats.submitted += 1
                tg.start_soon(_follow, client, who, source_id, receipt, stats)
            await anyio.sleep(every_s)
        tg.cancel_scope.cancel()
