"""The example host service's mail: each tenant's support identity sends an Email every few
seconds through its IdentityMailbox to the next tenant's support address (the cluster's SMTP
transport relays it to the cluster's own SMTP door, ``run_cluster.py``), follows each receipt to its
final status, applies a delivery event to every accepted Message, waits for the message to arrive
in the recipient's IdentityMailbox, and answers every other one with a follow-up that joins its
thread, printing what it sees.
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


async def _arrival(client: Client, to: Identity, subject: str, since_ms: int) -> dict[str, Any]:
    """The message with ``subject`` received by ``to`` (IN-4: a durable wait, polled)."""
    got = await client.wait_for_message(to.mailbox_id, tenant_id=to.tenant_id, identity_id=to.id,
                                        subject_contains=subject, received_after_ms=since_ms,
                                        timeout_ms=60_000, poll_interval_ms=100)
    view: dict[str, Any] = await client.call(
        "identity_mailbox", to.mailbox_id, {"op": "get_message", "message_id": got["message_id"]},
        tenant_id=to.tenant_id, identity_id=to.id)
    return view


async def _follow(client: Client, who: Identity, source_id: str, receipt: dict[str, Any],
                  stats: MailStats, to: Identity | None = None, subject: str = "",
                  follow_up: Any = None, to_domain: str = "") -> None:
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
    if receipt["status"] == "provider_accepted" and to is not None:
        try:
            view = await _arrival(client, to, subject, receipt["created_at_ms"] - 1)
        except RpcError as e:
            print(f"mail {receipt['email_id']}: not arrived: {e.code.value}", flush=True)
            return
        thread = await client.call("identity_mailbox", to.mailbox_id,
                                   {"op": "get_thread", "thread_id": view["thread_id"]},
                                   tenant_id=to.tenant_id, identity_id=to.id)
        print(f"mail {receipt['email_id']}: arrived in {to_domain}'s support mailbox as "
              f"{view['message_id']}, thread {view['thread_id']} "
              f"({len(thread['message_ids'])} message(s))", flush=True)
        if follow_up is not None and view["message_id_header"]:
            await follow_up(view["message_id_header"])


async def send_mail(client: Client, senders: list[tuple[Identity, str]], stats: MailStats,
                    stop_at: float, every_s: float = 3.0) -> None:
    """Every ``every_s``, one Email from each (identity, its domain) to the next one's support
    address; each followed in its own task until it has arrived; every other one gets a follow-up
    (``In-Reply-To``) that joins its thread in the recipient's mailbox."""
    run = f"{time.time():.0f}"
    async with anyio.create_task_group() as tg:

        async def submit(who: Identity, domain: str, to: tuple[Identity, str], source_id: str,
                         subject: str, text: str, headers: dict[str, str],
                         follow_up: Any = None, cc: tuple[str, ...] = ()) -> None:
            try:
                receipt = await client.call(
                    "identity_mailbox", who.mailbox_id,
                    Submit(source_id=source_id, from_=f"support@{domain}",
                           to=[f"support@{to[1]}"], cc=list(cc), subject=subject, text=text,
                           headers=headers),
                    tenant_id=who.tenant_id, identity_id=who.id)
            except RpcError as e:
                print(f"mail: submit failed: {e.code.value}: {e.message}", flush=True)
                return
            stats.submitted += 1
            tg.start_soon(_follow, client, who, source_id, receipt, stats, to[0], subject,
                          follow_up, to[1])

        n = 0
        while time.monotonic() < stop_at:
            for i, (who, domain) in enumerate(senders):
                n += 1
                to = senders[(i + 1) % len(senders)]
                subject = f"Hello #{n} ({run})"

                async def follow_up(parent: str, who: Identity = who, domain: str = domain,
                                    to: tuple[Identity, str] = to, n: int = n,
                                    subject: str = subject) -> None:
                    await submit(who, domain, to, f"hello-{run}-{n}-re", f"Re: {subject}",
                                 f"A follow-up to message {n}.",
                                 {"In-Reply-To": f"<{parent}>", "References": f"<{parent}>"})

                # Every fourth one is copied to an address no identity holds: in dev mode the
                # door takes it into the recipient tenant's catch-all identity (UI-6).
                await submit(who, domain, to, f"hello-{run}-{n}", subject,
                             f"This is message {n} from {domain}.", {},
                             follow_up if n % 2 else None,
                             (f"hello@{to[1]}",) if n % 4 == 0 else ())
            await anyio.sleep(every_s)
        tg.cancel_scope.cancel()
