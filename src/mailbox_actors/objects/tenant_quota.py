"""TenantQuota (OBJ-2): per-tenant sending limits per minute and per day, as rolling windows.

``reserve`` is idempotent on its key; ``release`` gives a reservation back; a daily maintenance alarm
drops windows and reservations older than 48 hours. The tenant's roster of identities arrives by
Post (``post_deliver``, ``objects/roster.py``). The window arithmetic lives in
``core.rate_windows``; this module only reads, asks core, and writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, assert_never

from mailbox_actors.core.durations import DAY_MS
from mailbox_actors.core.rate_windows import (
    DAY,
    MINUTE,
    RETENTION_MS,
    bucket_start,
    oldest_counted,
    retry_after_ms,
    used,
)
from mailbox_actors.objects import roster
from mailbox_actors.objects.shared_schema import (
    RATE_WINDOW_BUCKETS,
    RATE_WINDOW_BUCKETS_BOTH,
    RATE_WINDOW_BUMP,
    RATE_WINDOW_PRUNE,
    RATE_WINDOWS_SCHEMA,
)
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.receiver import receive
from mailbox_actors.post.sql import POST_RECEIVER_SCHEMA
from mailbox_actors.runtime.actor import Actor, ActorContext, Call
from mailbox_actors.runtime.migrations import PLATFORM_META, Migration
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.idempotency import IDEMPOTENT_OPS
from mailbox_actors.wire.post import PostDeliver
from mailbox_actors.wire.quota import (
    QUOTA_REPLIES,
    QuotaInit,
    QuotaRelease,
    QuotaRequest,
    QuotaReserve,
    QuotaStatus,
    QuotaStatusReply,
    QuotaUsage,
    ReleaseReply,
    ReserveReply,
    UsageReply,
)
from mailbox_actors.wire.roster import QuotaRoster
from mailbox_actors.wire.shared_replies import InitReply

__all__ = ["TenantQuota"]

MAINTENANCE_EVERY_MS = DAY_MS


class TenantQuota(Actor[QuotaRequest]):
    namespace = "tenant_quota"
    idempotent_ops = IDEMPOTENT_OPS["tenant_quota"]  # retried by the client (OPS-6)
    requests = QuotaRequest
    replies = QUOTA_REPLIES
    init_request = QuotaInit
    owner_kind = "tenant"
    not_found = ErrorCode.TENANT_NOT_FOUND
    migrations = (
        Migration(1, (
            "CREATE TABLE limits (id INTEGER PRIMARY KEY CHECK (id = 1), "
            "per_minute INTEGER NOT NULL, per_day INTEGER NOT NULL)",
            *RATE_WINDOWS_SCHEMA,
            "CREATE TABLE reservations (key TEXT PRIMARY KEY, reservation_id TEXT NOT NULL UNIQUE, "
            "count INTEGER NOT NULL, minute_start INTEGER NOT NULL, day_start INTEGER NOT NULL, "
            "created_ms INTEGER NOT NULL, released INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX reservations_created ON reservations (created_ms)",
        )),
        Migration(2, ()),  # the outbox, the runtime's since runtime schema 3
        Migration(3, (*POST_RECEIVER_SCHEMA, *roster.ROSTER_SCHEMA)),
        Migration(4, PLATFORM_META),
        # ``released`` becomes how many of the count were given back (was a 0/1 flag).
        Migration(5, ("UPDATE reservations SET released = count WHERE released = 1",)),
    )
    alarm_purposes: ClassVar[Mapping[str, str]] = {"maintenance": "maintenance"}

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self._limits: tuple[int, int] | None = None

    def limits(self) -> tuple[int, int]:
        if self._limits is None:
            row = self.sql.exec("SELECT per_minute, per_day FROM limits WHERE id = 1").all()
            if not row:
                raise MailboxActorsError(ErrorCode.TENANT_NOT_FOUND, "the quota has no limits yet")
            self._limits = (row[0][0], row[0][1])
        return self._limits

    async def handle(self, call: Call, req: QuotaRequest) -> Any:
        match req:
            case QuotaReserve():
                return self.sql.transaction_sync(lambda tx: self._reserve(tx, req))
            case QuotaInit():
                return self.sql.transaction_sync(lambda tx: self._init(tx, call, req))
            case QuotaRelease():
                return self.sql.transaction_sync(lambda tx: self._release(tx, req))
            case QuotaUsage():
                return self._usage()
            case PostDeliver():
                return receive(self.sql, req, roster.ROSTER, roster.apply)
            case QuotaRoster():
                return roster.read(self.sql)
            case QuotaStatus():
                per_minute, per_day = self.limits()
                return QuotaStatusReply(tenant_id=self.ctx.owner_tenant or "",
                                        per_minute=per_minute, per_day=per_day,
                                        schema_version=self.ctx.schema_version,
                                        alarm=self.sql.get_alarm())
            case _:
                assert_never(req)

    def _init(self, tx: SqlStorage, call: Call, req: QuotaInit) -> InitReply:
        created = self.ctx.claim_owner(call)
        # A repeated init may change the limits; the owner is fixed.
        before = tx.exec("SELECT per_minute, per_day FROM limits WHERE id = 1").all()
        if before and req.keep_existing:
            return InitReply(created=created)
        tx.exec("INSERT OR REPLACE INTO limits (id, per_minute, per_day) VALUES (1, ?, ?)",
                req.per_minute, req.per_day)
        self._limits = (req.per_minute, req.per_day)
        limits = {"per_minute": req.per_minute, "per_day": req.per_day}
        if created:
            self.ctx.schedule("maintenance", tx.now_ms() + MAINTENANCE_EVERY_MS)
            self.ctx.emit(tx, "quota.created", limits)
        elif before and tuple(before[0]) != (req.per_minute, req.per_day):
            self.ctx.emit(tx, "quota.limits_changed", limits)
        return InitReply(created=created)

    def _reserve(self, tx: SqlStorage, req: QuotaReserve) -> ReserveReply:
        prior = tx.exec("SELECT reservation_id, count, released FROM reservations WHERE key = ?",
                        req.key).all()
        if prior:  # a replay: the same answer, for the same request only
            rid, count, released = prior[0]
            if count != req.count:
                raise MailboxActorsError(
                    ErrorCode.CONFLICT, f"idempotency key reused with count {req.count}; it "
                    f"reserved {count}", details={"count": count},
                    fix="Use a new key for a different reservation.")
            if released >= count:
                raise MailboxActorsError(
                    ErrorCode.CONFLICT, "this key's reservation was released",
                    fix="Use a new key to reserve again.")
            return ReserveReply(reservation_id=rid)
        per_minute, per_day = self.limits()
        now = tx.now_ms()
        waits = []
        for w, limit in ((MINUTE, per_minute), (DAY, per_day)):
            if req.count > limit:
                raise InvalidRequest(f"count {req.count} exceeds the {w.scope} limit {limit}",
                                     details={"count": req.count, "limit": limit})
            buckets = [(r[0], r[1])
                       for r in tx.exec(RATE_WINDOW_BUCKETS, w.scope, oldest_counted(w, now))]
            wait = retry_after_ms(w, buckets, limit, req.count, now)
            if wait is not None:
                waits.append(wait)
        if waits:
            raise MailboxActorsError(ErrorCode.RATE_LIMITED, "the tenant's sending quota is full",
                                     details={"retry_after_ms": max(waits)})
        rid = self.ctx.new_id("rsv")
        m, d = bucket_start(MINUTE, now), bucket_start(DAY, now)
        tx.exec("INSERT INTO reservations (key, reservation_id, count, minute_start, day_start, "
                "created_ms) VALUES (?, ?, ?, ?, ?, ?)", req.key, rid, req.count, m, d, now)
        tx.exec(RATE_WINDOW_BUMP, MINUTE.scope, m, req.count)
        tx.exec(RATE_WINDOW_BUMP, DAY.scope, d, req.count)
        return ReserveReply(reservation_id=rid)

    def _release(self, tx: SqlStorage, req: QuotaRelease) -> ReleaseReply:
        row = tx.exec("SELECT count, minute_start, day_start, released FROM reservations "
                      "WHERE reservation_id = ?", req.reservation_id).all()
        if not row:
            return ReleaseReply(released=False)
        count, m, d, released = row[0]
        give = count - released if req.count is None else min(req.count, count - released)
        if give <= 0:  # all of it was given back already
            return ReleaseReply(released=False)
        for scope, start in ((MINUTE.scope, m), (DAY.scope, d)):
            tx.exec("UPDATE rate_windows SET count = max(0, count - ?) "
                    "WHERE scope = ? AND start_ms = ?", give, scope, start)
        tx.exec("UPDATE reservations SET released = released + ? WHERE reservation_id = ?", give,
                req.reservation_id)
        return ReleaseReply(released=True)

    def _usage(self) -> UsageReply:
        per_minute, per_day = self.limits()
        now = self.ctx.now_ms()
        # Both windows' buckets in one statement (two range reads of the primary key).
        minute: list[tuple[int, int]] = []
        day: list[tuple[int, int]] = []
        for in_day, start, count in self.sql.exec(RATE_WINDOW_BUCKETS_BOTH, MINUTE.scope,
                                                  oldest_counted(MINUTE, now), DAY.scope,
                                                  oldest_counted(DAY, now)):
            (day if in_day else minute).append((start, count))
        return UsageReply(minute_used=used(MINUTE, minute, now), minute_limit=per_minute,
                          day_used=used(DAY, day, now), day_limit=per_day)

    async def maintenance(self) -> None:
        """Daily: drop windows and reservations older than 48 hours, then re-arm. (Events past
        the tenant's events_days are the runtime's to prune: ``runtime/outbox.PRUNE_PURPOSE``.)"""

        def run(tx: SqlStorage) -> None:
            cutoff = tx.now_ms() - RETENTION_MS
            tx.exec(RATE_WINDOW_PRUNE, cutoff)
            tx.exec("DELETE FROM reservations WHERE created_ms < ?", cutoff)
            self.ctx.schedule("maintenance", tx.now_ms() + MAINTENANCE_EVERY_MS)
        self.sql.transaction_sync(run)
