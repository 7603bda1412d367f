"""DomainMonitor (OBJ-3, DM-1..DM-5): one sending domain's DNS records, checked until trusted.

``handle`` hands each op to its module: ``setup`` (init, status) and ``checking`` (check now, and
``alarm:check``, which runs often while pending or in doubt and daily once verified). Verdicts and
the state machine are pure rules in ``core.dns``; the resolver is the node's ``RESOLVER``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, assert_never

from mailbox_actors.objects.domain_monitor import checking, setup
from mailbox_actors.objects.notify_routes import NOTIFY_ROUTES
from mailbox_actors.post.actor_post import Post
from mailbox_actors.post.ops import post_op
from mailbox_actors.post.sql import POST_RUNS, POST_SCHEMA
from mailbox_actors.runtime.actor import Actor, ActorContext, Call
from mailbox_actors.runtime.migrations import PLATFORM_META, Migration
from mailbox_actors.wire.domain import (
    DOMAIN_REPLIES,
    DomainCheck,
    DomainInit,
    DomainRequest,
    DomainStatus,
)
from mailbox_actors.wire.errors import ErrorCode
from mailbox_actors.wire.idempotency import IDEMPOTENT_OPS
from mailbox_actors.wire.post import PostDeadLetters, PostRetry

__all__ = ["DomainMonitor"]


class DomainMonitor(Actor[DomainRequest]):
    namespace = "domain_monitor"
    idempotent_ops = IDEMPOTENT_OPS["domain_monitor"]  # retried by the client (OPS-6)
    requests = DomainRequest
    replies = DOMAIN_REPLIES
    init_request = DomainInit
    owner_kind = "tenant"
    not_found = ErrorCode.DOMAIN_NOT_FOUND
    migrations = (
        Migration(1, (
            "CREATE TABLE domain (id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL, "
            "state TEXT NOT NULL, created_at_ms INTEGER NOT NULL)",
        )),
        Migration(2, ()),  # the outbox, the runtime's since runtime schema 3
        Migration(3, (
            "ALTER TABLE domain ADD COLUMN expected BLOB",
            "ALTER TABLE domain ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE domain ADD COLUMN last_results BLOB",
            "ALTER TABLE domain ADD COLUMN last_check_ms INTEGER",
            "CREATE TABLE checks (id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, "
            "run BLOB NOT NULL)",
        )),
        Migration(4, PLATFORM_META),
        Migration(5, (*POST_SCHEMA, *POST_RUNS)),  # OBJ-4: state events to the Notifier by Post
    )
    alarm_purposes: ClassVar[Mapping[str, str]] = {"check": "check_alarm", "post": "post_tick"}

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.post = Post(self, NOTIFY_ROUTES)

    async def post_tick(self) -> None:
        await self.post.run()

    async def handle(self, call: Call, req: DomainRequest) -> Any:
        match req:
            case DomainStatus():
                return setup.status(self.ctx, self.sql)
            case DomainCheck():
                return await checking.check_now(self.ctx, self.sql, self.post)
            case DomainInit():
                return self.sql.transaction_sync(lambda tx: setup.init(self.ctx, tx, call, req))
            case PostDeadLetters() | PostRetry():
                return post_op(self.post, req)
            case _:
                assert_never(req)

    async def check_alarm(self) -> None:
        """``alarm:check``: one run; it schedules the next one itself (none once failed)."""
        await checking.check_now(self.ctx, self.sql, self.post)
