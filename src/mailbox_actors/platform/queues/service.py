"""The cluster's durable queues (Q-1): one SQLite file shared by every node process through
aiosqlite, or PostgreSQL (CL-7, ``queues.postgres``), behind the same ``SharedStore``.

Delivery is at least once. A receive claims messages atomically (one ``UPDATE ... RETURNING``) under
a lease that lapses after the visibility timeout, so a consumer that dies mid-batch has its messages
delivered again, and two processes never hold one message at once. Every time decision uses the
``Clock``. How statements run on the file is ``database``'s; a delivery is ``message``'s; what the
queues hold is ``reads``'; the dead-letter records ``dead_letters``'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from weakref import WeakSet

import msgspec

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.group_commit import GroupCommit
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.queues.bodies import (
    check_batch_size,
    check_delay_ms,
    check_queue_name,
    encode_body,
)
from mailbox_actors.platform.queues.database import queue_file
from mailbox_actors.platform.queues.dead_letters import DeadLetterRecords
from mailbox_actors.platform.queues.handoff import Handoff
from mailbox_actors.platform.queues.message import DeadLetterInfo, Message, Policy
from mailbox_actors.platform.queues.reads import QueueReads
from mailbox_actors.platform.shared_store import SharedStore, Tx
from mailbox_actors.platform.sqlite.store import SqliteStore
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["NOTIFY_CHANNEL", "QueueService", "QueueWatcher"]

_log = get_logger("mailbox_actors.queues")
_decoder = msgspec.json.Decoder(dict[str, Any])
_CLAIM_COLUMNS = ("seq, id, kind, body, attempts, enqueued_at_ms, origin_queue, reason, "
                  "failed_attempts")
_MESSAGE_COLUMNS = ("id", "queue", "kind", "body", "enqueued_at_ms", "visible_at_ms", "attempts",
                    "lease")
_MESSAGE_TYPES = ("text", "text", "text", "text", "bigint", "bigint", "integer", "text")
NOTIFY_CHANNEL = "ma_queues"  # notified by the PostgreSQL schema's trigger, the queue as payload
_MAX_PARAMS = 500  # ids per statement in ack_many, well under SQLite's bound-parameter limit
_INSERT_ROWS = 500  # rows per INSERT statement: 4,000 parameters, under SQLite's 32,766


class QueueWatcher(Protocol):
    """Told when a message of its queue becomes visible at ``at_ms`` (sent through this service).
    ``running``: it consumes on its own (``Consumer.run``); ``waiting``: idle, waiting for news."""

    running: bool
    waiting: bool

    def on_visible(self, at_ms: int) -> None: ...


class QueueService(DeadLetterRecords, QueueReads):
    """Every queue of a cluster in one store. ``async with QueueService(path, ...) as q:``"""

    def __init__(self, path: Path | SharedStore, *, clock: Clock, ids: Ids,
                 metrics: Any | None = None, busy_timeout_ms: int = 10_000) -> None:
        if isinstance(path, str | Path):
            self._store: SharedStore = SqliteStore(queue_file(Path(path),
                                                              busy_timeout_ms=busy_timeout_ms))
            self.path: Path | None = Path(path)
        else:  # PostgreSQL's (platform.queues.postgres)
            self._store = path
            self.path = None
        self._sql = self._store.dialect
        self.metrics = metrics
        self._clock = clock
        self._ids = ids
        self._acks: GroupCommit[tuple[str, str]] = GroupCommit(self._delete,
                                                               max_items=_MAX_PARAMS)
        self._watchers: dict[str, WeakSet[QueueWatcher]] = {}
        self._handoffs: dict[str, Handoff] = {}
        # PostgreSQL notifies every process when a message becomes visible (a trigger on the
        # table): idle consumers are woken by that, and only look on their own for what no one
        # announces (a lease lapsing on a machine that died).
        notifications = self._store.notifications()
        self.notified = notifications is not None
        if notifications is not None:
            notifications.subscribe(NOTIFY_CHANNEL, self._heard)

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def where(self) -> str:
        return self._store.where

    async def open(self) -> None:
        await self._store.open()

    async def close(self) -> None:
        await self._store.close()

    async def __aenter__(self) -> QueueService:
        await self.open()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # ---- watchers ------------------------------------------------------------------------------

    def watch(self, queue: str, watcher: QueueWatcher) -> None:
        """Tell ``watcher`` when this service makes a message of ``queue`` visible (held weakly)."""
        self._watchers.setdefault(queue, WeakSet()).add(watcher)

    def _notify(self, queue: str, at_ms: int) -> None:
        """Tell the watchers of ``queue``. Where the store notifies (PostgreSQL) and the message
        is visible now, only ONE running consumer of this process is woken (an idle one if any):
        waking every consumer of every process for one message sent them all to claim it, and
        all but one found nothing. A consumer whose claim found messages wakes one more idle
        sibling (``wake_idle``), so a backlog still spreads to every consumer."""
        watchers = list(self._watchers.get(queue, ()))
        if self.notified and at_ms <= self._clock.now_ms():
            running = [w for w in watchers if w.running]
            if running:
                woken = next((w for w in running if w.waiting), running[0])
                watchers = [w for w in watchers if not w.running] + [woken]
        for watcher in watchers:
            watcher.on_visible(at_ms)

    def idle_siblings(self, queue: str, *, but: QueueWatcher) -> int:
        """How many running consumers of ``queue`` other than ``but`` are idle."""
        return sum(1 for w in list(self._watchers.get(queue, ()))
                   if w is not but and w.running and w.waiting)

    def wake_idle(self, queue: str, at_ms: int, *, but: QueueWatcher) -> None:
        """Wake one idle running consumer of ``queue`` other than ``but`` (there may be more)."""
        for watcher in list(self._watchers.get(queue, ())):
            if watcher is not but and watcher.running and watcher.waiting:
                watcher.on_visible(at_ms)
                return

    def _heard(self, queue: str | None) -> None:
        """A notification: a message of ``queue`` became visible in some process (None: any
        may have, while the listening connection was down)."""
        now = self._clock.now_ms()
        for q in list(self._watchers) if queue is None else [queue]:
            self._notify(q, now)

    # ---- producing -----------------------------------------------------------------------------

    async def send(self, queue: str, body: Mapping[str, Any], *, delay_seconds: float = 0) -> str:
        """Enqueue one body; its ``qm_`` id. Visible after ``delay_seconds``."""
        return (await self.send_batch(queue, [body], delay_seconds=delay_seconds))[0]

    async def send_batch(self, queue: str, bodies: Sequence[Mapping[str, Any]], *,
                         delay_seconds: float = 0,
                         also: Callable[[Tx], Awaitable[object]] | None = None,
                         with_clause: tuple[str, Sequence[Any]] | None = None) -> list[str]:
        """Enqueue every body in one transaction, or none if one is refused; their ids in order.

        ``also(tx)`` runs first in that same transaction (the outbox's dispatch writes the event
        index with its queue messages, CL-14): only where ``shares_transactions_with`` says the
        other store's statements can join it (PostgreSQL). On PostgreSQL the transaction is run
        again whole if its connection dies, so ``also`` must be safe to repeat. ``with_clause``
        (``WITH ...`` and its parameters, safe to repeat too) goes in front of the INSERT instead:
        one statement, one round trip, when the bodies fit in one."""
        check_queue_name(queue)
        delay_ms = check_delay_ms(delay_seconds)
        if isinstance(bodies, str | bytes | Mapping) or not isinstance(bodies, Sequence):
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST,
                                     "send_batch takes a sequence of bodies", details={"field": "bodies"})
        single = len(bodies) == 1
        encoded = [encode_body(b, where="body" if single else f"bodies[{i}]")
                   for i, b in enumerate(bodies)]
        if not encoded:
            return []
        now = self._clock.now_ms()
        visible = now + delay_ms
        handoff = self._handoffs.get(queue) if not delay_ms else None
        n_held = min(len(encoded), handoff.space(now)) if handoff is not None else 0
        # The first n_held go to this process's running consumers, leased to them as a claim
        # would leave them (one delivery counted); the rest are visible to every consumer.
        lease = self._ids.new_id("qc") if n_held else None
        until = now + handoff.visibility_ms if handoff is not None and n_held else visible
        rows = [(self._ids.new_id("qm"), queue, kind, data.decode("utf-8"), now,
                 until if i < n_held else visible, 1 if i < n_held else 0,
                 lease if i < n_held else None)
                for i, (data, kind) in enumerate(encoded)]
        await self._insert_rows(rows, also, with_clause)
        if handoff is not None and n_held and lease is not None:
            policy = Policy(handoff.max_retries, handoff.dead_letter_queue)
            held = [Message(self, id=mid, queue=queue, body=_decoder.decode(body), attempts=1,
                            enqueued_at_ms=now, lease=lease, policy=policy, dead_letter=None)
                    for mid, _q, _kind, body, *_ in rows[:n_held]]
            if self._handoffs.get(queue) is handoff and handoff.runners:
                handoff.put(now, held)
            else:  # the last consumer stopped while the rows were written: nobody would take them
                await self.release(held)
        if len(rows) > n_held:
            self._notify(queue, visible)
        return [r[0] for r in rows]

    async def _insert_rows(self, rows: Sequence[tuple[Any, ...]],
                           also: Callable[[Tx], Awaitable[object]] | None = None,
                      with_clause: tuple[str, Sequence[Any]] | None = None) -> None:
        """All ``rows`` or none. One multi-row INSERT when they fit in one statement (a statement is
        atomic on its own: one round trip to the connection's thread, no BEGIN and COMMIT); else
        one transaction of several. A row whose id is there already is left (a PostgreSQL
        transaction run again after its connection died during COMMIT)."""
        chunks = [rows[i:i + _INSERT_ROWS] for i in range(0, len(rows), _INSERT_ROWS)]
        if with_clause is not None:
            if len(chunks) != 1:
                raise ValueError("a with_clause goes with bodies that fit in one statement")
            sql, params = self._insert(rows)
            await self._store.fetch(f"{with_clause[0]} {sql}", [*with_clause[1], *params])
            return
        if len(chunks) == 1 and also is None:
            await self._store.fetch(*self._insert(rows))
            return

        async def insert(conn: Tx) -> None:
            if also is not None:
                await also(conn)
            for chunk in chunks:
                await conn.write(*self._insert(chunk))

        await self._store.run(insert)

    def _insert(self, rows: Sequence[tuple[Any, ...]]) -> tuple[str, list[Any]]:
        return self._sql.insert_rows("messages", _MESSAGE_COLUMNS, _MESSAGE_TYPES, rows)

    def shares_transactions_with(self, other: SharedStore) -> bool:
        """Whether ``other``'s statements can join this service's transactions (``also``): both
        in one PostgreSQL database."""
        mine = getattr(self._store, "db", None)
        return mine is not None and mine is getattr(other, "db", None)

    # ---- hand-off to consumers in this process ---------------------------------------------------

    def join_handoff(self, queue: str, wake: Callable[[bool], bool], *, visibility_ms: int,
                     max_retries: int | None, dead_letter_queue: str | None, room: int
                     ) -> Handoff | None:
        """A running consumer of ``queue`` offers to take messages this process sends to it
        (``queue_handoff``). None when another consumer of ``queue`` here already does so under
        a different policy: this one then only claims."""
        policy = self._policy(queue, max_retries, dead_letter_queue)
        handoff = self._handoffs.get(queue)
        if handoff is None:
            handoff = self._handoffs[queue] = Handoff(
                queue, visibility_ms=visibility_ms, max_retries=policy.max_retries,
                dead_letter_queue=policy.dead_letter_queue, room=0)
        elif (handoff.visibility_ms, handoff.max_retries, handoff.dead_letter_queue) != (
                visibility_ms, policy.max_retries, policy.dead_letter_queue):
            return None
        handoff.wakers.append(wake)
        handoff.room += room
        return handoff

    async def leave_handoff(self, handoff: Handoff, wake: Callable[[bool], bool], room: int
                            ) -> None:
        """The consumer stops taking; the last one out gives back what is still held."""
        handoff.wakers.remove(wake)
        handoff.room -= room
        if handoff.runners <= 0:
            if self._handoffs.get(handoff.queue) is handoff:
                del self._handoffs[handoff.queue]
            await self.release(handoff.drain())

    async def release(self, messages: Sequence[Message]) -> None:
        """Make held, unsettled messages visible to every consumer now, as if never delivered."""
        now = self._clock.now_ms()
        by_lease: dict[tuple[str, str], list[str]] = {}  # (queue, lease) -> ids: one send's or claim's
        for msg in messages:
            if not msg._settled:
                msg._settled = True
                by_lease.setdefault((msg.queue, msg._lease), []).append(msg.id)
        for (queue, lease), id_list in by_lease.items():
            for start in range(0, len(id_list), _MAX_PARAMS):
                ids, id_params = self._sql.among("id", id_list[start:start + _MAX_PARAMS])
                rows = await self._store.fetch(
                    "UPDATE messages SET lease = NULL, visible_at_ms = ?, attempts = attempts - 1 "
                    f"WHERE lease = ? AND {ids} RETURNING id", (now, lease, *id_params))
                if rows:
                    self._notify(queue, now)

    # ---- consuming -----------------------------------------------------------------------------

    async def receive(self, queue: str, *, max_batch_size: int = 10, visibility_ms: int = 30_000,
                      max_retries: int | None = 3, dead_letter_queue: str | None = None
                      ) -> list[Message]:
        """Claim up to ``max_batch_size`` visible messages, oldest first, for ``visibility_ms``.

        A message delivered more than ``max_retries + 1`` times without being settled (its
        consumers died) is dead-lettered here instead of returned. ``max_retries=None`` never
        dead-letters.
        """
        check_queue_name(queue)
        check_batch_size(max_batch_size)
        if isinstance(visibility_ms, bool) or not isinstance(visibility_ms, int) or visibility_ms < 1:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST, "visibility_ms must be >= 1",
                                     details={"field": "visibility_ms"})
        policy = self._policy(queue, max_retries, dead_letter_queue)
        now = self._clock.now_ms()
        lease = self._ids.new_id("qc")
        rows = await self._store.fetch(
            "UPDATE messages SET lease = ?, visible_at_ms = ?, attempts = attempts + 1 "
            # Oldest visible first, in the index's own order (queue, visible_at_ms, rowid): the
            # claim reads max_batch_size index entries, however long the backlog is.
            "WHERE seq IN (SELECT seq FROM messages WHERE queue = ? AND visible_at_ms <= ? "
            f"ORDER BY visible_at_ms, seq LIMIT ?{self._sql.skip_locked}) "
            f"RETURNING {_CLAIM_COLUMNS}",
            (lease, now + visibility_ms, queue, now, max_batch_size))
        rows.sort(key=lambda r: r[0])
        out: list[Message] = []
        for _seq, mid, _kind, body, attempts, enqueued, origin, reason, failed in rows:
            msg = Message(self, id=mid, queue=queue, body=_decoder.decode(body), attempts=attempts,
                          enqueued_at_ms=enqueued, lease=lease, policy=policy,
                          dead_letter=None if origin is None else DeadLetterInfo(
                              origin, reason or "unknown", failed or 0))
            if policy.max_retries is not None and attempts > policy.max_retries + 1:
                msg._settled = True
                try:  # this claim delivered nothing: record the deliveries that did happen
                    await self._dead_letter(msg, "visibility_timeout", deliveries=attempts - 1)
                except Exception as exc:
                    # Its lease lapses and the next claim dead-letters it; the rest of the batch
                    # is still handed out, not left leased with a delivery counted for nothing.
                    _log.error("queue_dead_letter_failed", queue=queue, message_id=mid,
                               error_type=type(exc).__name__)
                continue
            out.append(msg)
        return out

    def _policy(self, queue: str, max_retries: int | None, dead_letter_queue: str | None) -> Policy:
        if max_retries is not None and (isinstance(max_retries, bool)
                                        or not isinstance(max_retries, int) or max_retries < 0):
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST, "max_retries must be >= 0",
                                     details={"field": "max_retries"})
        if dead_letter_queue is None:
            dlq = f"{queue}-dlq"
            if len(dlq) > 63:
                raise MailboxActorsError(
                    ErrorCode.INVALID_REQUEST,
                    f"queue name {queue!r} is too long to derive its dead-letter queue "
                    f"({len(dlq)} > 63 characters); pass dead_letter_queue=",
                    details={"field": "dead_letter_queue"})
        else:
            dlq = check_queue_name(dead_letter_queue, what="dead-letter queue")
        if dlq == queue:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST,
                                     f"queue {queue!r} cannot be its own dead-letter queue",
                                     details={"field": "dead_letter_queue"})
        return Policy(max_retries, dlq)

    async def ack_many(self, queue: str, ids: Sequence[str]) -> None:
        """Delete these messages of ``queue``, whoever holds them: they are never delivered again.

        Acks of concurrent consumers are written together (``GroupCommit``): one DELETE for
        every id waiting so far; this returns once its own are gone.
        """
        check_queue_name(queue)
        if not ids:
            return
        await self._acks.submit((queue, i) for i in ids)

    async def _delete(self, pairs: Sequence[tuple[str, str]]) -> None:
        by_queue: dict[str, list[str]] = {}
        for q, mid in pairs:
            by_queue.setdefault(q, []).append(mid)
        for q, id_list in by_queue.items():
            for start in range(0, len(id_list), _MAX_PARAMS):
                ids, id_params = self._sql.among("id", id_list[start:start + _MAX_PARAMS])
                await self._store.fetch(f"DELETE FROM messages WHERE queue = ? AND {ids}",
                                        (q, *id_params))

    async def retry_all(self, messages: Iterable[Message], *, delay_seconds: float = 0) -> None:
        """``retry(delay_seconds)`` each unsettled message (Cloudflare's ``batch.retryAll``)."""
        delay_ms = check_delay_ms(delay_seconds)
        for msg in messages:
            await msg._retry(delay_ms, "retries_exhausted")

    async def _retry_message(self, msg: Message, delay_ms: int, reason: str) -> None:
        budget = msg._policy.max_retries
        if budget is not None and msg.attempts > budget:
            await self._dead_letter(msg, reason)
            return
        visible = self._clock.now_ms() + delay_ms
        rows = await self._store.fetch(
            "UPDATE messages SET lease = NULL, visible_at_ms = ? WHERE id = ? AND lease = ? "
            "RETURNING id", (visible, msg.id, msg._lease))
        if rows:
            self._notify(msg.queue, visible)

    async def _dead_letter(self, msg: Message, reason: str, *, deliveries: int | None = None
                           ) -> None:
        """Move a held message to its dead-letter queue, ready at once, with why and after how
        many deliveries (``msg.attempts`` unless told)."""
        dlq = msg._policy.dead_letter_queue
        now = self._clock.now_ms()
        tried = msg.attempts if deliveries is None else deliveries
        rows = await self._store.fetch(
            "UPDATE messages SET queue = ?, lease = NULL, visible_at_ms = ?, attempts = 0, "
            "origin_queue = ?, reason = ?, failed_attempts = ? WHERE id = ? AND lease = ? "
            "RETURNING id", (dlq, now, msg.queue, reason, tried, msg.id, msg._lease))
        if rows:
            _log.warning("queue_message_dead_lettered", queue=msg.queue, dead_letter_queue=dlq,
                         message_id=msg.id, kind=msg.kind, reason=reason, attempts=tried)
            self._notify(dlq, now)
