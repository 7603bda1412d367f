"""What the inbound modules (``inbound``, ``waits``, ``ingest_batch``) use of an IdentityMailbox:
its context and storage, and one fact the instance keeps between calls. They take this, not the
mailbox, so none of them imports the actor that imports them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mailbox_actors.platform.storage.sql import SqlStorage
    from mailbox_actors.runtime.context import ActorContext

__all__ = ["Inbox"]


class Inbox:
    """``ctx`` and ``sql`` of one live mailbox, and ``no_pending_waits``: this instance knows it
    holds no pending wait, so ingest skips the waits query (set by that query finding none,
    cleared before any ``register_wait``: ``waits``)."""

    __slots__ = ("ctx", "no_pending_waits", "sql")

    def __init__(self, ctx: ActorContext, sql: SqlStorage) -> None:
        self.ctx = ctx
        self.sql = sql
        self.no_pending_waits = False
