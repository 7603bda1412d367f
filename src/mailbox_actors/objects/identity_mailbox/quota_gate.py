"""The TenantQuota gate of dispatch (CA-7, RPC-9): one reservation per attempt, taken in blocks
for a run's due Emails, where a full window delays every due Email and never drops one.

The quota is the ``tenant_quota`` object named by the tenant id; one never initialised means no
limit. A reservation's key names the attempt (and the block's size), so a run repeated after a
crash gets the same reservation back instead of counting again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from mailbox_actors.objects.identity_mailbox.carrier_store import EmailRow
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.quota import QuotaRelease, QuotaReserve

if TYPE_CHECKING:
    from mailbox_actors.objects.identity_mailbox.actor import IdentityMailbox

__all__ = ["QUOTA_BLOCK", "QUOTA_RETRY_MS", "Credits", "delay_due", "give_back", "quota_id",
           "reserve"]

QUOTA_RETRY_MS = 5_000  # TenantQuota could not answer now
QUOTA_BLOCK = 32  # at most this many attempts reserved in one TenantQuota call


def quota_id(mb: IdentityMailbox) -> str:
    """The tenant's TenantQuota: the object named by the tenant id (as host services name it)."""
    return mb.ctx.id_from_name("tenant_quota", mb.ctx.owner_tenant or "")


def delay_due(mb: IdentityMailbox, tx: SqlStorage, until: int) -> None:
    mb.fresh.delay(tx, until)


class Credits:
    """Quota reserved ahead for the Emails a run is about to send (one ``reserve`` of ``count``
    for several instead of one each); the lock keeps concurrent sends from reserving twice."""

    def __init__(self) -> None:
        self.left = 0
        self.lock = anyio.Lock()
        self.due = 1  # how many Emails were due when last looked (the next block's size)
        self.block: str | None = None  # the reservation ``left`` belongs to, if a block


async def give_back(mb: IdentityMailbox, credits: Credits) -> None:
    """At the end of a run, release what is left of its block: the block was sized by the
    Emails due when it was taken, and some may have ended (expired, cancelled, refused by
    can_send) or been left for the next run; their quota goes back to the tenant (CA-7)."""
    if not credits.left or credits.block is None:
        return
    left, credits.left = credits.left, 0
    try:
        await mb.ctx.call("tenant_quota", quota_id(mb),
                          QuotaRelease(reservation_id=credits.block, count=left),
                          tenant_id=mb.ctx.owner_tenant)
    except MailboxActorsError as e:  # not given back: it ages out with the window
        mb.ctx.log.warning("carrier_quota_release_failed", code=e.code.value)


async def reserve(mb: IdentityMailbox, row: EmailRow, credits: Credits | None) -> bool:
    """TenantQuota's consent for one attempt (RPC-9): True to go on; False when the window is
    full (everything due waits until it has room) or the quota cannot answer now."""
    if credits is None:
        return await reserve_count(mb, row, 1) is not None
    if credits.left and not credits.lock.locked():
        credits.left -= 1  # reserved already: no call, and no wait for the lock (no await here)
        return True
    async with credits.lock:
        if credits.left == 0:
            count = max(1, min(QUOTA_BLOCK, credits.due))
            block = await reserve_count(mb, row, count, quiet=True) if count > 1 else None
            if block is not None:
                credits.left, credits.block = count, block or None
            elif await reserve_count(mb, row, 1) is not None:
                credits.left, credits.block = 1, None
            else:
                return False
        credits.left -= 1
        return True


async def reserve_count(mb: IdentityMailbox, row: EmailRow, count: int,
                         quiet: bool = False) -> str | None:
    """The reservation's id ("" when the quota has no limits); None when it was refused."""
    ctx, sql = mb.ctx, mb.sql
    # The key names the attempt (and the block's size), so a run repeated after a crash gets
    # the same reservation back instead of counting again.
    key = f"{row.email_id}/{row.attempts}" + (f"/x{count}" if count > 1 else "")
    try:
        reply = await ctx.call("tenant_quota", quota_id(mb),
                               QuotaReserve(key=key, count=count, identity_id=ctx.owner_identity),
                               tenant_id=ctx.owner_tenant)
    except MailboxActorsError as e:
        if e.code == ErrorCode.TENANT_NOT_FOUND:  # not initialised means no limit
            return ""
        if quiet:  # a block that does not fit now: the caller asks for one
            return None
        if e.code == ErrorCode.RATE_LIMITED:  # the window is full: everything due waits
            wait = int((e.details or {}).get("retry_after_ms", QUOTA_RETRY_MS))
            sql.transaction_sync(lambda tx: delay_due(mb, tx, tx.now_ms() + max(1, wait)))
            return None
        ctx.log.warning("carrier_quota_unavailable", email_id=row.email_id, code=e.code.value)
        sql.transaction_sync(lambda tx: delay_due(mb, tx, tx.now_ms() + QUOTA_RETRY_MS))
        return None
    return str(reply.get("reservation_id") or "") if isinstance(reply, dict) else ""
