"""The Post executor (PO-3, PO-5): one loop shared by the actor-SQLite, control-database and
PostgreSQL adapters.

Each round asks the store to claim the due head of each address (and the pending jobs queued
right behind it), which records the attempt and arms recovery before anything is sent; then it
calls the receivers, one address per task and each address's jobs in order, stopping an address
at its first job that is not delivered; then it settles every job of the round in one store
transaction. Jobs it did not get to are put back untouched. Decisions are ``core.post.rules``'s.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import msgspec
import structlog

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
from mailbox_actors.platform.rng import Rng
from mailbox_actors.post.routes import Routes
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.post import PostEnvelope

__all__ = ["Claimed", "Deliver", "PostExecutor", "PostStore"]

_JSON = msgspec.json.Decoder(dict[str, Any])
_log = structlog.get_logger("mailbox_actors.post")


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
    attempts: int          # including the attempt this claim recorded
    lease_until_ms: int


class PostStore(Protocol):
    async def claim(self, now_ms: int, lease_until_ms: int) -> list[list[Claimed]]:
        """Record an attempt for the due head of each address and the jobs right behind it,
        arm recovery at ``lease_until_ms``, and return them grouped by address, in order."""
        ...

    async def save_prepared(self, job: Claimed, prepared: bytes) -> None: ...

    async def settle(self, results: list[tuple[Claimed, Settlement | None]]) -> None:
        """Apply each settlement in one transaction (None: the job was not sent; put it back)."""
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
            async with anyio.create_task_group() as tg:
                for chain in chains:
                    tg.start_soon(self._chain, chain, results)
            await self.store.settle(results)
            delivered += sum(1 for _, s in results
                             if s is not None and s.state is JobState.DELIVERED)
            for job, s in results:
                if s is not None and s.state is JobState.DEAD:
                    # Route, reason and count only: keys are the producer's, and may say more.
                    _log.warning("post_dead_letter", producer=job.producer, route=job.route,
                                 reason=s.reason, attempts=job.attempts)

    async def _chain(self, chain: list[Claimed],
                     results: list[tuple[Claimed, Settlement | None]]) -> None:
        async with self._limit:
            stopped = False
            for job in chain:
                # A job whose attempt ran out before it was sent was not attempted: put back.
                if stopped or self.clock.now_ms() > job.lease_until_ms:
                    results.append((job, None))
                    stopped = True
                    continue
                outcome = await self._attempt(job)
                results.append((job, settle(outcome, job.attempts, self.clock.now_ms(),
                                            self.policy, self.rng.random())))
                stopped = not isinstance(outcome, Delivered)

    async def _attempt(self, job: Claimed) -> AttemptOutcome:
        route = self.routes.get(job.route)
        if route is None:
            return Failed("unknown_route")  # code that knows it may come back: keep it
        event = job.prepared or job.event
        try:
            with self._bounded(job.lease_until_ms):
                if route.prepare is not None and job.prepared is None:
                    intent = msgspec.json.decode(job.event, type=route.event)
                    address = msgspec.json.decode(job.address, type=route.address)
                    fact = await route.prepare.run(address, intent, job.lease_until_ms)
                    if self.clock.now_ms() > job.lease_until_ms:
                        return Failed("preparation_expired")  # too late: it may not send
                    if not isinstance(fact, route.prepare.event):
                        return Failed("bad_preparation")
                    event = msgspec.json.encode(fact)
                    await self.store.save_prepared(job, event)  # persisted before it is sent
                    job.prepared = event
                if self.clock.now_ms() > job.lease_until_ms:
                    return Failed("attempt_expired")
                envelope = PostEnvelope(
                    key=job.key, route=job.route, kind=job.kind, producer=job.producer,
                    seq=job.seq, address=_JSON.decode(job.address), event=_JSON.decode(event))
                answer = await self.deliver(job, envelope, job.lease_until_ms)
        except MailboxActorsError as e:
            return outcome_of_error(e.code.value, e.retryable)
        except TimeoutError:
            return Failed("attempt_expired")
        except Exception as e:  # a preparation that raised: retried like any failed attempt
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
