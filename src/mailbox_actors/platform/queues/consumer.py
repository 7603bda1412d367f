"""Queue consumers (Q-1, Q-2): batches handled one message at a time, and the dead-letter recorder.

A ``Consumer`` claims a batch when it is full or its oldest message has waited ``max_batch_timeout_s``,
hands each message to the handler in order, and settles what the handler left unsettled: ack on
return, retry on an exception, so one message never fails the batch. It never decides a consumer's
own retry budget (seed section 7: an ``attempt`` field or an age, see ``queues``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.logging import LOG_REQUEST_ID, get_logger
from mailbox_actors.platform.queues.acks import AckBehind
from mailbox_actors.platform.queues.bodies import check_batch_size, check_delay_ms, check_queue_name
from mailbox_actors.platform.queues.handoff import Handoff
from mailbox_actors.platform.queues.message import Message
from mailbox_actors.platform.queues.service import QueueService
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["Consumer", "DeadLetterRecorder", "Handler", "age_ms", "reenqueue_with_attempt"]

Handler = Callable[[Message], Awaitable[None]]

_log = get_logger("mailbox_actors.queues")
# Batches at one instant before drain/run_due give up: a handler that re-sends its message with no
# delay, forever, must fail loudly rather than hang FakeClock.advance.
_MAX_ROUNDS = 100_000
# Messages each running consumer may have handed to it (queue_handoff) before sends go to the file
# for any consumer of the cluster.
_HANDOFF_ROOM = 512
NOTIFIED_POLL_S = 1.0  # an idle consumer's own look at a queue whose store notifies
# Where nothing announces other processes' sends (SQLite), each look at the file that finds
# nothing doubles the wait for the next, from the poll interval up to this; whatever is found or
# handed over brings it back to the poll interval. An idle node then reads the file about once a
# second instead of 20 times (80 wake-ups a second), and a send from another process after a
# quiet spell waits at most this long: this process's own sends are handed over or announced at
# once, so that is only other nodes' overflow, retries' delays (known, not polled for) aside.
IDLE_POLL_S = 1.0
# Where a claim is a round trip to a server (PostgreSQL), a running consumer with a hand-off
# claims a batch for itself and one for each idle sibling in this process, up to this many
# messages, and hands the siblings theirs (leased, as sent messages are): a backlog costs one
# claim per process and turn, not one per consumer. A process whose consumers are all busy
# claims no more than its own batch: it never hoards what another process could handle now.
CLAIM_AHEAD = 16


class _Looks:
    """When a consumer without a hand-off next reads the file (anyio time), and which consumer
    waits for that time (``Handoff`` has both too, for the running consumers it serves)."""

    __slots__ = ("look_at", "looker", "quiet")

    def __init__(self) -> None:
        self.look_at = 0.0
        self.looker: object | None = None
        self.quiet = 0  # looks in a row that found nothing


def _invalid(message: str, field: str) -> MailboxActorsError:
    return MailboxActorsError(ErrorCode.INVALID_REQUEST, message, details={"field": field})


class Consumer:
    """Consumes one queue with ``handler``; ``run()`` on a real clock, or driven by a FakeClock
    (``clock.attach(consumer)``) through ``next_due_ms``/``run_due``; ``drain()`` in tests."""

    def __init__(self, service: QueueService, queue: str, handler: Handler, *,
                 max_batch_size: int = 10, max_batch_timeout_s: float = 5.0,
                 max_retries: int | None = 3, visibility_ms: int = 30_000,
                 dead_letter_queue: str | None = None, poll_interval_s: float = 0.02,
                 retry_delay_s: float = 0.0, idle_poll_s: float = IDLE_POLL_S) -> None:
        self.queue = check_queue_name(queue)
        self.max_batch_size = check_batch_size(max_batch_size)
        if not math.isfinite(max_batch_timeout_s) or max_batch_timeout_s < 0:
            raise _invalid("max_batch_timeout_s must be >= 0", "max_batch_timeout_s")
        if not poll_interval_s > 0:
            raise _invalid("poll_interval_s must be > 0", "poll_interval_s")
        if not math.isfinite(idle_poll_s) or idle_poll_s <= 0:
            raise _invalid("idle_poll_s must be > 0", "idle_poll_s")
        # The service checks these on every receive; checking here reports them at start-up.
        self.dead_letter_queue = service._policy(queue, max_retries, dead_letter_queue).dead_letter_queue
        if isinstance(visibility_ms, bool) or not isinstance(visibility_ms, int) \
                or visibility_ms < 1:
            raise _invalid("visibility_ms must be an integer >= 1", "visibility_ms")
        self.max_batch_timeout_ms = round(max_batch_timeout_s * 1000)
        # Before a message whose handler raised is delivered again (0, as in Cloudflare Queues).
        self.retry_delay_ms = check_delay_ms(retry_delay_s)
        self.max_retries = max_retries
        self.visibility_ms = visibility_ms
        # On PostgreSQL a notification wakes an idle consumer; its own look is only for what no
        # one announces (a lease lapsing on a machine that died), so it need not be frequent.
        self.poll_interval_s = max(poll_interval_s, NOTIFIED_POLL_S) if service.notified \
            else poll_interval_s
        self.idle_poll_s = max(self.poll_interval_s, idle_poll_s)
        self.handled = 0
        self._service = service
        self._clock: Clock = service.clock
        self._handler = handler
        self._due: int | None = None
        self._due_known = False  # until a first look at the queue, next_due_ms says "now"
        self._wake: anyio.Event | None = None
        self.running = False  # in run(): woken by on_visible (QueueWatcher)
        self.waiting = False  # in run(), idle: waiting for a wake or its next look
        self._look = True  # run(): whether the file may have news (a send, a poll interval passed)
        self._looks: _Looks | Handoff | None = None  # run(): shared with its siblings (a hand-off)
        service.watch(queue, self)

    # ---- waking --------------------------------------------------------------------------------

    def wake(self) -> None:
        """Look at the queue again now (``run()``), and at the next FakeClock step."""
        self._due_known = False
        self._look = True
        if self._wake is not None:
            self._wake.set()

    def _wake_for_handoff(self, rouse: bool = True) -> bool:
        """A hand-off's news (``Handoff.put``); True when it roused this consumer from its wait.
        Busy (handling a batch, or reading the file), it is always told, so it looks at the
        hand-off before it next waits; idle, it is woken only when ``rouse``. One woken already
        that has not run yet counts as busy: two hand-offs in one turn rouse two consumers."""
        wake = self._wake
        if wake is None or wake.is_set() or (self.waiting and not rouse):
            return False
        wake.set()
        return self.waiting

    def on_visible(self, at_ms: int) -> None:
        # May be earlier than the real due time (a batch timeout not yet passed): a run_due that
        # finds nothing due just looks again, so erring early is safe and erring late is not.
        if self._due_known:
            self._due = at_ms if self._due is None else min(self._due, at_ms)
        self._look = True
        if self._wake is not None:
            self._wake.set()

    # ---- FakeClock's TimedWork -----------------------------------------------------------------

    def next_due_ms(self) -> int | None:
        return self._due if self._due_known else self._clock.now_ms()

    async def run_due(self, now_ms: int) -> None:
        """Deliver every batch that is due at ``now_ms`` (full, or its oldest message waited the
        batch timeout), then note when the next one will be."""
        for _ in range(_MAX_ROUNDS):
            due = await self._batch_due()
            if due is None or due > now_ms:
                self._due, self._due_known = due, True
                return
            await self._handle_batch(await self._receive())
        raise RuntimeError(f"queue {self.queue!r}: still due after {_MAX_ROUNDS} batches at one "
                           "instant (a handler re-sending without a delay?)")

    async def drain(self) -> int:
        """Handle everything visible now, batch timeout or not; how many messages were handled."""
        handled = 0
        for _ in range(_MAX_ROUNDS):
            batch = await self._receive()
            if not batch:
                # A claim can return nothing while messages remain visible: those it
                # dead-lettered for too many deliveries. Look once more before stopping.
                nxt = await self._service.next_visible_ms(self.queue)
                if nxt is None or nxt > self._clock.now_ms():
                    break
                continue
            await self._handle_batch(batch)
            handled += len(batch)
        else:
            raise RuntimeError(f"queue {self.queue!r}: drain did not finish in {_MAX_ROUNDS} batches")
        due = await self._batch_due()
        self._due, self._due_known = due, True
        return handled

    # ---- the real-clock loop -------------------------------------------------------------------

    async def run(self) -> None:
        """Consume until cancelled: look at the queue every ``poll_interval_s`` (other processes'
        sends), less often while the looks find nothing (up to ``idle_poll_s``), or at once when
        woken by a send through this service. Without a batch timeout, messages this
        process sends to the queue are handed straight to its running consumers
        (``queue_handoff``)."""
        handoff = None
        if not self.max_batch_timeout_ms:
            handoff = self._service.join_handoff(
                self.queue, self._wake_for_handoff, visibility_ms=self.visibility_ms,
                max_retries=self.max_retries, dead_letter_queue=self.dead_letter_queue,
                room=_HANDOFF_ROOM)
        self.running = True
        try:
            async with anyio.create_task_group() as tg:
                acks = AckBehind(self._service, self.queue, tg)
                try:
                    await self._run(handoff, acks)
                finally:
                    with anyio.CancelScope(shield=True):
                        await acks.close()
        finally:
            self.running = self.waiting = False
            if handoff is not None:
                with anyio.CancelScope(shield=True):
                    try:
                        await self._service.leave_handoff(handoff, self._wake_for_handoff,
                                                          _HANDOFF_ROOM)
                    except Exception as exc:  # the service closed first: the leases lapse
                        _log.warning("queue_handoff_release_failed", queue=self.queue,
                                     error_type=type(exc).__name__)

    async def _run(self, handoff: Handoff | None, acks: AckBehind) -> None:
        # When the file is next read (anyio time): shared through the hand-off by the running
        # consumers of this queue in this process, so together they read it once per poll
        # interval. Only reading the file moves it: a hand-off wake must not put the read off.
        looks = self._looks = handoff if handoff is not None else _Looks()
        try:
            await self._consume(handoff, acks, looks)
        finally:
            self._let_go(looks)

    async def _consume(self, handoff: Handoff | None, acks: AckBehind,
                       looks: _Looks | Handoff) -> None:
        found = True  # whether the last claim found messages: then claim again at once
        while True:
            # A new event only once the last one was set: one not set yet still catches every
            # wake from here on (most turns take a hand-off and never wait).
            if self._wake is None or self._wake.is_set():
                self._wake = anyio.Event()
            wait_s = self.poll_interval_s
            try:
                if handoff is not None and len(handoff):
                    looks.quiet = 0
                    self._let_go(looks)
                    batch, stale = handoff.take(self.max_batch_size, self._clock.now_ms())
                    if stale:
                        await self._give_back(stale)
                    await self._handle_batch(batch, acks)
                    continue
                if not self.max_batch_timeout_ms:
                    # Else woken by a hand-off another consumer took: nothing new in the file.
                    if found or self._look or anyio.current_time() >= looks.look_at:
                        found = await self._claim(looks, found, acks)
                        if found:
                            continue
                else:
                    due = await self._batch_due()
                    now = self._clock.now_ms()
                    if due is not None and due <= now:
                        await self._handle_batch(await self._receive(), acks)
                        continue
                    if due is not None:
                        wait_s = min(wait_s, (due - now) / 1000)
            except Exception as exc:  # a busy database or a closed service: keep consuming
                _log.error("queue_consumer_error", queue=self.queue, error_type=type(exc).__name__)
                looks.look_at = anyio.current_time() + self.poll_interval_s
                found = False
            self.waiting = True
            try:
                if not self.max_batch_timeout_ms:
                    # One consumer of the queue in this process waits for the next look (it
                    # keeps that while it only looks); the others wait for a wake, with no timer
                    # of their own: an idle node wakes once a poll interval, not once a consumer.
                    if looks.looker is None:
                        looks.looker = self
                    with anyio.move_on_at(looks.look_at if looks.looker is self else math.inf):
                        await self._wake.wait()
                else:
                    with anyio.move_on_after(wait_s):
                        await self._wake.wait()
            finally:
                self.waiting = False

    async def _claim(self, looks: _Looks | Handoff, found: bool, acks: AckBehind) -> bool:
        """Without a batch timeout, whatever is visible is a batch: claim it and handle it; False
        when nothing was visible. A claim is a write (it takes the file's write lock even when it
        finds nothing), so unless the last claim found messages, read first whether any is."""
        self._look = False
        # This look is the poll interval's: the other consumers woken with this one (a
        # hand-off wakes them all) must not read the file too while it is under way.
        looks.look_at = anyio.current_time() + self.poll_interval_s
        # Where the store notifies (PostgreSQL) a claim that finds nothing takes no lock: claim
        # at once rather than read first.
        claim_now = found or self._service.notified
        due = None if claim_now else await self._service.next_visible_ms(self.queue)
        if claim_now or (due is not None and due <= self._clock.now_ms()):
            if not found and not self._service.notified:
                self._service._notify(self.queue, due or 0)  # wake the others too
            idle = self._service.idle_siblings(self.queue, but=self) \
                if isinstance(looks, Handoff) and self._service.notified else 0
            batch = await self._receive(
                max(self.max_batch_size, min(CLAIM_AHEAD, self.max_batch_size * (1 + idle))))
            if batch:
                looks.quiet = 0
                if isinstance(looks, Handoff) and len(batch) > self.max_batch_size:
                    looks.put(self._clock.now_ms(), batch[self.max_batch_size:])
                    batch = batch[:self.max_batch_size]
                elif self._service.notified:  # more may be waiting: one more sibling looks
                    self._service.wake_idle(self.queue, self._clock.now_ms(), but=self)
                self._let_go(looks)
                await self._handle_batch(batch, acks)
                return True
            due = await self._service.next_visible_ms(self.queue)
        now_rt, now = anyio.current_time(), self._clock.now_ms()
        if due is not None and due <= now:
            # Visible but not claimed: those the claim dead-lettered. Look again at once.
            looks.look_at = now_rt
            return False
        looks.look_at = now_rt + min(self.poll_interval_s * 2 ** min(looks.quiet, 20),
                                     self.idle_poll_s)
        looks.quiet += 1
        if due is not None:  # a delayed message, or a lease that lapses, before the next poll
            looks.look_at = min(looks.look_at, now_rt + (due - now) / 1000)
        return False

    def _let_go(self, looks: _Looks | Handoff) -> None:
        """Before handling a batch (or at the end): the next look is another's to wait for. One
        sibling waiting without a timer is woken to take it (with work under way, not idle); if
        none waits, the next to wait takes it."""
        if looks.looker is not self:
            return
        looks.looker = None
        for w in list(self._service._watchers.get(self.queue, ())):
            if isinstance(w, Consumer) and w is not self and w.waiting and w._looks is looks:
                w._wake_for_handoff()
                return

    async def _give_back(self, messages: Sequence[Message]) -> None:
        """Make messages this consumer took but will not handle visible to every consumer."""
        try:
            await self._service.release(messages)
        except Exception as exc:  # their leases lapse instead; whatever else was taken goes on
            _log.warning("queue_release_failed", queue=self.queue, error_type=type(exc).__name__)

    # ---- handling ------------------------------------------------------------------------------

    async def _batch_due(self) -> int | None:
        return await self._service.batch_due_ms(
            self.queue, max_batch_size=self.max_batch_size,
            max_batch_timeout_ms=self.max_batch_timeout_ms)

    async def _receive(self, up_to: int | None = None) -> list[Message]:
        return await self._service.receive(
            self.queue, max_batch_size=up_to or self.max_batch_size,
            visibility_ms=self.visibility_ms,
            max_retries=self.max_retries, dead_letter_queue=self.dead_letter_queue)

    async def _handle_batch(self, batch: Sequence[Message], acks: AckBehind | None = None) -> None:
        for i, msg in enumerate(batch):
            try:
                await self._handle(msg, acks)
            except BaseException:
                if acks is None:  # drain() and run_due(): tests stop these to play a crash
                    raise
                # run() stopped mid-batch: the messages not yet started go back to the queue at
                # once (the one being handled keeps its lease: its effect may have happened).
                with anyio.CancelScope(shield=True):
                    await self._give_back(batch[i + 1:])
                raise

    async def _handle(self, msg: Message, acks: AckBehind | None = None) -> None:
        self.handled += 1
        # Each delivery is a request of its own (seed section 3): a fresh req_ id on every log
        # line of its handler and of this consumer, and carried into the actor calls it makes
        # (the router takes the bound id) and the requests it sends (webhooks: a header).
        # (``bind_request``'s work written out: its generator cost a few calls every delivery.)
        token = LOG_REQUEST_ID.set(self._service._ids.new_id("req"))
        try:
            await self._handle_one(msg, acks)
        finally:
            LOG_REQUEST_ID.reset(token)

    async def _handle_one(self, msg: Message, acks: AckBehind | None) -> None:
        try:
            try:
                await self._handler(msg)
            except Exception as exc:
                # Ids, kind and the error's type only: an exception's text may quote content.
                _log.warning("queue_handler_failed", queue=self.queue, message_id=msg.id,
                             kind=msg.kind, attempts=msg.attempts, error_type=type(exc).__name__)
                await msg._retry(self.retry_delay_ms, f"handler_error: {type(exc).__name__}")
                return
            if msg.settled:
                return
            if acks is not None:
                await acks.add(msg)  # written behind (queue_acks)
            else:
                await msg.ack()
        except Exception as exc:
            # Settling failed (the database stayed locked): the lease lapses and the message is
            # delivered again; the rest of the batch goes on.
            _log.error("queue_settle_failed", queue=self.queue, message_id=msg.id,
                       error_type=type(exc).__name__)


class DeadLetterRecorder(Consumer):
    """The consumer of a dead-letter queue: records each letter in ``dead_letters`` (with its queue,
    id, kind, body, reason, attempts and time), logs it at error level and counts it in
    ``queue_dead_letters_total{queue=...}``. Never dead-letters a letter itself: a record that
    fails (the database stayed locked) is tried again after ``retry_delay_s``."""

    def __init__(self, service: QueueService, dead_letter_queue: str, *, max_batch_size: int = 10,
                 max_batch_timeout_s: float = 0.0, visibility_ms: int = 30_000,
                 poll_interval_s: float = 0.02, retry_delay_s: float = 10.0) -> None:
        super().__init__(service, dead_letter_queue, self._record, max_batch_size=max_batch_size,
                         max_batch_timeout_s=max_batch_timeout_s, max_retries=None,
                         visibility_ms=visibility_ms, poll_interval_s=poll_interval_s,
                         retry_delay_s=retry_delay_s)

    async def _record(self, msg: Message) -> None:
        await self._service.record_dead_letter(msg)


async def reenqueue_with_attempt(service: QueueService, queue: str, body: Mapping[str, Any],
                                 schedule_s: Sequence[float]) -> str | None:
    """Seed section 7's re-enqueue scheme: send a copy of ``body`` with ``attempt + 1`` after the
    schedule's delay for that attempt, and return its id; the caller then acks the original.

    ``attempt`` absent counts as 0 (the first try). None when the schedule is spent: the caller
    records the failure (and acks) or lets the queue dead-letter it (``retry()``).
    """
    attempt = body.get("attempt", 0)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise _invalid('queue body "attempt" must be an integer >= 0', "body.attempt")
    if attempt >= len(schedule_s):
        return None
    return await service.send(queue, {**body, "attempt": attempt + 1},
                              delay_seconds=schedule_s[attempt])


def age_ms(body_timestamp_ms: int, clock: Clock) -> int:
    """Seed section 7's age scheme: how old the work is, from a timestamp the consumer owns."""
    return max(0, clock.now_ms() - body_timestamp_ms)
