"""The TenantQuota gate of IdentityMailbox's Carrier (CA-7, RPC-9): one reservation per attempt,
taken in blocks for a run's due Emails, where a full window delays every due Email and never drops
one.

The quota is the ``tenant_quota`` object named by the tenant id; one never initialised means no
limit. A reservation's key names the attempt (and the block's size), so a run repeated after a
crash gets the same reservation back instead of counting again.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from mailbox_actors.carrier.store import EmailRow
from mailbox_actors.runtime.context import ActorContext
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.quota import QuotaRelease, QuotaReserve

__all__ = ["QUOTA_BLOCK", "QUOTA_RETRY_MS", "QuotaGate", "QuotaRun"]

QUOTA_RETRY_MS = 5_000  # TenantQuota could not answer now
QUOTA_BLOCK = 32  # at most this many attempts reserved in one TenantQuota call


class QuotaGate:
    """Carrier's ``DispatchGate`` for one mailbox: its tenant's TenantQuota."""

    def __init__(self, ctx: ActorContext) -> None:
        self._ctx = ctx

    def run(self, delay: Callable[[int], None]) -> QuotaRun:
        ctx = self._ctx
        # The tenant's TenantQuota: the object named by the tenant id (as host services name it).
        return QuotaRun(ctx, ctx.id_from_name("tenant_quota", ctx.owner_tenant or ""), delay)


class QuotaRun:
    """Quota reserved ahead for the Emails a run is about to send (one ``reserve`` of ``count``
    for several instead of one each); the lock keeps concurrent sends from reserving twice."""

    def __init__(self, ctx: ActorContext, quota_id: str, delay: Callable[[int], None]) -> None:
        self._ctx = ctx
        self._quota_id = quota_id
        self._delay = delay
        self.left = 0
        self.lock = anyio.Lock()
        self.due = 1  # how many Emails were due when last looked (the next block's size)
        self.block: str | None = None  # the reservation ``left`` belongs to, if a block

    async def end(self) -> None:
        """At the end of a run, release what is left of its block: the block was sized by the
        Emails due when it was taken, and some may have ended (expired, cancelled, refused by
        can_send) or been left for the next run; their quota goes back to the tenant (CA-7)."""
        if not self.left or self.block is None:
            return
        left, self.left = self.left, 0
        try:
            await self._ctx.call("tenant_quota", self._quota_id,
                                 QuotaRelease(reservation_id=self.block, count=left),
                                 tenant_id=self._ctx.owner_tenant)
        except MailboxActorsError as e:  # not given back: it ages out with the window
            self._ctx.log.warning("carrier_quota_release_failed", code=e.code.value)

    async def admit(self, row: EmailRow) -> bool:
        """TenantQuota's consent for one attempt (RPC-9): True to go on; False when the window is
        full (everything due waits until it has room) or the quota cannot answer now."""
        if self.left and not self.lock.locked():
            self.left -= 1  # reserved already: no call, and no wait for the lock (no await here)
            return True
        async with self.lock:
            if self.left == 0:
                count = max(1, min(QUOTA_BLOCK, self.due))
                block = await self._reserve(row, count, quiet=True) if count > 1 else None
                if block is not None:
                    self.left, self.block = count, block or None
                elif await self._reserve(row, 1) is not None:
                    self.left, self.block = 1, None
                else:
                    return False
            self.left -= 1
            return True

    async def _reserve(self, row: EmailRow, count: int, quiet: bool = False) -> str | None:
        """The reservation's id ("" when the quota has no limits); None when it was refused."""
        ctx = self._ctx
        # The key names the attempt (and the block's size), so a run repeated after a crash gets
        # the same reservation back instead of counting again.
        key = f"{row.email_id}/{row.attempts}" + (f"/x{count}" if count > 1 else "")
        try:
            reply = await ctx.call("tenant_quota", self._quota_id,
                                   QuotaReserve(key=key, count=count,
                                                identity_id=ctx.owner_identity),
                                   tenant_id=ctx.owner_tenant)
        except MailboxActorsError as e:
            if e.code == ErrorCode.TENANT_NOT_FOUND:  # not initialised means no limit
                return ""
            if quiet:  # a block that does not fit now: the caller asks for one
                return None
            if e.code == ErrorCode.RATE_LIMITED:  # the window is full: everything due waits
                self._delay(int((e.details or {}).get("retry_after_ms", QUOTA_RETRY_MS)))
                return None
            ctx.log.warning("carrier_quota_unavailable", email_id=row.email_id,
                            code=e.code.value)
            self._delay(QUOTA_RETRY_MS)
            return None
        return str(reply.get("reservation_id") or "") if isinstance(reply, dict) else ""
