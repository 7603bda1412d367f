"""The Post executor (PO-3, PO-5): one loop shared by the actor-SQLite, control-database and
PostgreSQL adapters.

Each round asks the store to claim the due head of each address, which records the run (and
the attempt, when the receiver is called next) and arms recovery before anything is sent, and to
read the pending jobs queued right behind it without touching them. It calls the receivers, one
address per task and each address's jobs in order: a follower is started (its run and attempt
recorded, in the same store transaction that settles its delivered predecessor) only once its
predecessor is delivered, so a letter held behind an undelivered one never shows ``running``,
never counts an attempt and spends none of its budget (PO-12). An address stops at its first job
that is not delivered; the round's last settlements commit in one store transaction.
Decisions are ``core.post.rules``'s.

Counts (PO-12): ``attempts`` are receiver invocations, recorded before each call and never taken
back; ``runs`` (the budget's count) also include a preparation that failed or expired before the
call.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import msgspec

from mailbox_actors.core.post.rules import (
    AttemptOutcome,
    Delivered,
    Failed,
    JobState,
    RetryPolicy,
    Settlement,
    outcome_of_answer,
    outcome_of_error,
    settle,
)
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.rng import Rng
from mailbox_actors.post.routes import Routes
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.post import PostEnvelope

__all__ = ["Claimed", "Deliver", "PostExecutor", "PostStore"]

_JSON = msgspec.json.Decoder(dict[str, Any])
_log = get_logger("mailbox_actors.post")


@dataclass
class Claimed:
    """One job of a round, with its envelope, as the store claimed it (attempt recorded)."""

    seq: int
    key: str
    route: str
    kind: str
    producer: str
    namespace: str
    object_name: str
    tenant_id: str | None
    identity_id: str | None
    address: bytes
    event: bytes
    prepared: bytes | None
    attempts: int          # receiver invocations, including this run's once it is recorded
    lease_until_ms: int
    runs: int = 0          # the executor's tries, including this one once it is started
    started: bool = True   # False: a follower read behind its head, not written yet
    needs_preparation: bool = False  # its route prepares a fact it does not have yet

    @property
    def calls_next(self) -> bool:
        """Whether starting this job's run is its receiver invocation (nothing to prepare
        first): then the attempt is recorded with the run."""
        return self.prepared is not None or not self.needs_preparation

    def mark_started(self, lease_until_ms: int) -> None:
        """What a store's start recorded, on this copy: one more run, and one more attempt
        when the call comes next."""
        self.runs += 1
        self.attempts += 1 if self.calls_next else 0
        self.lease_until_ms = lease_until_ms
        self.started = True


class PostStore(Protocol):
    async def claim(self, now_ms: int, lease_until_ms: int) -> list[list[Claimed]]:
        """Start the due head of each address (``running``, its run recorded, and its attempt
        when ``calls_next``), arm recovery at ``lease_until_ms``, and return each head with the
        due jobs right behind it (read, not written: ``started=False``), grouped by address."""
        ...

    async def start(self, job: Claimed, settled: list[tuple[Claimed, Settlement]]) -> bool:
        """In one transaction: apply ``settled`` (a delivered predecessor), then start ``job``
        as ``claim`` starts a head. False (nothing of ``job`` written) when it may not go on:
        the predecessor's receipt hook failed, or ``job`` is no longer pending."""
        ...

    async def save_prepared(self, job: Claimed, prepared: bytes) -> None:
        """Persist the prepared fact and record the attempt: the receiver is called next."""
        ...

    async def settle(self, results: list[tuple[Claimed, Settlement | None]]) -> None:
        """Apply each settlement in one transaction (None: a follower never started; nothing
        of it was written, so nothing is)."""
        ...


# Sends one envelope: returns the receiver's ok value or raises MailboxActorsError.
Deliver = Callable[[Claimed, PostEnvelope, int], Awaitable[Any]]


class PostExecutor:
    def __init__(self, store: PostStore, routes: Routes, deliver: Deliver, *, clock: Clock,
                 rng: Rng, policy: RetryPolicy, deadline_ms: int, concurrency: int = 16) -> None:
        self.store = store
        self.routes = routes
        self.deliver = deliver
        self.clock = clock
        self.rng = rng
        self.policy = policy
        self.deadline_ms = deadline_ms
        self._limit = anyio.CapacityLimiter(concurrency)

    async def run(self) -> int:
        """Run rounds until nothing is due; return how many jobs were delivered."""
        delivered = 0
        while True:
            now = self.clock.now_ms()
            chains = await self.store.claim(now, now + self.deadline_ms)
            if not chains:
                return delivered
            results: list[tuple[Claimed, Settlement | None]] = []
            settled_early: list[Claimed] = []  # delivered, settled when their follower started
            async with anyio.create_task_group() as tg:
                for chain in chains:
                    tg.start_soon(self._chain, chain, results, settled_early)
            await self.store.settle(results)
            delivered += len(settled_early) + sum(
                1 for _, s in results if s is not None and s.state is JobState.DELIVERED)
            for job, s in results:
                if s is not None and s.state is JobState.DEAD:
                    # Route, reason and count only: keys are the producer's, and may say more.
                    _log.warning("post_dead_letter", producer=job.producer, route=job.route,
                                 reason=s.reason, attempts=job.attempts)

    async def _chain(self, chain: list[Claimed], results: list[tuple[Claimed, Settlement | None]],
                     settled_early: list[Claimed]) -> None:
        async with self._limit:
            delivered: tuple[Claimed, Settlement] | None = None
            for job in chain:
                if not job.started:
                    # A follower: started only now that its predecessor is delivered, in the
                    # transaction that settles that one; not at all once the round's lease ran out.
                    if self.clock.now_ms() > job.lease_until_ms:
                        break
                    assert delivered is not None
                    settled, delivered = [delivered], None
                    go = await self.store.start(job, settled)
                    settled_early.append(settled[0][0])
                    if not go:
                        break
                outcome = await self._attempt(job)
                s = settle(outcome, job.runs, self.clock.now_ms(), self.policy, self.rng.random())
                if not isinstance(outcome, Delivered):
                    results.append((job, s))
                    break
                delivered = (job, s)
            if delivered is not None:
                results.append(delivered)

    async def _attempt(self, job: Claimed) -> AttemptOutcome:
        route = self.routes.get(job.route)
        if route is None:
            return Failed("unknown_route")  # code that knows it may come back: keep it
        event = job.prepared or job.event
        try:
            with self._bounded(job.lease_until_ms):
                if not job.calls_next:
                    assert route.prepare is not None
                    intent = msgspec.json.decode(job.event, type=route.event)
                    address = msgspec.json.decode(job.address, type=route.address)
                    fact = await route.prepare.run(address, intent, job.lease_until_ms)
                    if self.clock.now_ms() > job.lease_until_ms:
                        return Failed("preparation_expired")  # too late: it may not send
                    if not isinstance(fact, route.prepare.event):
                        return Failed("bad_preparation")
                    event = msgspec.json.encode(fact)
                    # Persisted before it is sent, with the attempt: the call follows at once.
                    await self.store.save_prepared(job, event)
                    job.prepared = event
                    job.attempts += 1
                # From here on the attempt is recorded: the receiver is called (past its deadline
                # it answers timeout itself), so the count is of invocations.
                envelope = PostEnvelope(
                    key=job.key, route=job.route, kind=job.kind, producer=job.producer,
                    seq=job.seq, address=_JSON.decode(job.address), event=_JSON.decode(event))
                answer = await self.deliver(job, envelope, job.lease_until_ms)
        except MailboxActorsError as e:
            return outcome_of_error(e.code.value, e.retryable)
        except TimeoutError:
            return Failed("attempt_expired")
        except Exception as e:  # a preparation (or a receiver callable) that raised: retried
            return Failed(f"error:{type(e).__name__}")
        if self.clock.now_ms() > job.lease_until_ms:
            # The answer came after the attempt's deadline: its recovery may already have
            # started another attempt, so it is treated as lost; the retry hears "duplicate".
            return Failed("attempt_expired")
        return outcome_of_answer(answer)

    def _bounded(self, lease_until_ms: int) -> Any:
        """A real-time bound on the attempt, as long as the clock says reaching the lease takes
        (a FakeClock's time moves only when the test moves it: no bound, and the deadline checks
        above decide)."""
        delay = self.clock.deadline_to_sleep_time(lease_until_ms + 1)
        return anyio.fail_after(None if math.isinf(delay) else delay)
