"""Post on an actor's own SQLite file (PO-2..PO-6): ``send`` in the producer's transaction, the
executor run from the producer's alarm purpose, ``latest``, ``retry``, ``dead_letters``.

An actor makes one ``Post`` per activation (``self.post = Post(self, ROUTES)``), adds
``POST_SCHEMA`` to its migrations and maps a purpose to a method that awaits ``self.post.run()``
(``alarm_purposes = {"post": "post_tick"}``). Every write here happens inside a
``transaction_sync``; the receiver is called only between transactions, through the router.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec

from mailbox_actors.core.post.order import Eligibility, due_at, eligibility
from mailbox_actors.core.post.rules import (
    ATTEMPT_DEADLINE_MS,
    JobState,
    RetryAction,
    RetryPolicy,
    Settlement,
    address_key,
    retry_action,
    settle_expired,
)
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post import sql as q
from mailbox_actors.post.executor import Claimed, Deliver, PostExecutor
from mailbox_actors.post.routes import Route, Routes
from mailbox_actors.post.rows import (
    CHAIN,
    RECORD_SQL,
    ROUND_ADDRESSES,
    check_key,
    check_page_limit,
    claimed_of,
    dead_letter_page,
    digest,
    envelope_values,
    record_of,
    settle_values,
)
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.post import DeadLetterPage, PostDeliver, PostEnvelope, PostRecord

__all__ = ["OnDelivered", "Post"]

# (tx, key, route name, receipt) inside the producer's settling transaction; raising leaves the
# job and the hook's ledger both pending, and the attempt is retried (the receiver says duplicate).
OnDelivered = Callable[[SqlStorage, str, str, dict[str, Any] | None], None]



class Post:
    """Post for one producer actor (one activation)."""

    def __init__(self, actor: Actor, routes: Routes, *, purpose: str = "post",
                 policy: RetryPolicy | None = None, on_delivered: OnDelivered | None = None,
                 attempt_deadline_ms: int = ATTEMPT_DEADLINE_MS,
                 deliver: Deliver | None = None) -> None:
        """``deliver``: how an envelope reaches its receiver (default: a call to the actor the
        route names; the string outbox, ``post.outbox``, hands it to a named callable)."""
        if purpose not in type(actor).alarm_purposes:
            raise ValueError(f"{type(actor).__name__}.alarm_purposes has no {purpose!r}: Post "
                             "runs from an alarm purpose of its own")
        self.actor = actor
        self.ctx = actor.ctx
        self.sql = actor.ctx.storage
        self.routes = routes
        self.purpose = purpose
        self.policy = policy or RetryPolicy()
        self.on_delivered = on_delivered
        self.producer = f"{actor.ctx.namespace}/{actor.ctx.id}"
        self._deadline_ms = attempt_deadline_ms
        self._send_one: Deliver = deliver or self._deliver
        self._executor: PostExecutor | None = None  # made at the first run: activations are many

    # ---- the producer's API ----------------------------------------------------------------

    def send(self, tx: SqlStorage, route: Route[Any, Any], address: Any, event: Any,
             key: str) -> PostRecord:
        """Inside the producer's ``transaction_sync``: stage the envelope and its job and arm the
        wake, all committing with the producer's change (PO-2). A replay of ``key`` with the same
        content keeps the existing job (or its receipt); other content is ``conflict``."""
        if not tx.in_transaction:
            raise RuntimeError("post.send runs inside the producer's transaction_sync")
        if route not in self.routes:
            raise InvalidRequest("the route is not one of this Post's routes",
                                 details={"route": getattr(route, "name", None)})
        check_key(key)
        addr = route.check_address(address)
        ev = route.check_event(event)
        dg = digest(route.name, addr, ev)
        now = tx.now_ms()
        prior = tx.exec("SELECT digest FROM post_envelopes WHERE key = ?", key).all()
        if prior:
            if prior[0][0] != dg:
                raise MailboxActorsError(ErrorCode.CONFLICT,
                                         "this Post key was sent with other content",
                                         fix="Use a new key for a different event.")
            return self._record(tx, key)
        tx.exec(q.ENVELOPE_INSERT, key, *envelope_values(
            route, address, (addr, ev, dg), producer=self.producer, now=now,
            tenant=self.ctx.owner_tenant))
        tx.exec(q.JOB_INSERT, key, address_key(route.address_kind, addr), now, now)
        self.ctx.schedule(self.purpose, now)
        return self._record(tx, key)

    def latest(self, kind: str, address: Any) -> PostRecord | None:
        """The newest envelope staged for this recipient, or its receipt (PO-6); reads only that
        address's rows."""
        raw = msgspec.to_builtins(address)
        rows = self.sql.exec(f"{RECORD_SQL} WHERE j.address_key = ? ORDER BY j.seq DESC LIMIT 1",
                             address_key(kind, raw)).all()
        return record_of(rows[0]) if rows else None

    def get(self, key: str) -> PostRecord | None:
        rows = self.sql.exec(f"{RECORD_SQL} WHERE j.key = ?", key).all()
        return record_of(rows[0]) if rows else None

    def retry(self, tx: SqlStorage, key: str) -> RetryAction:
        """Inside the producer's transaction (PO-6): a settled failed attempt is tried now; a dead
        letter goes back in line behind the work queued now, with its prepared fact and a fresh
        budget; queued and running jobs are left alone; a delivered receipt is never reopened."""
        if not tx.in_transaction:
            raise RuntimeError("post.retry runs inside the producer's transaction_sync")
        rows = tx.exec("SELECT state FROM post_jobs WHERE key = ?", check_key(key)).all()
        if not rows:
            # The producer's own not-found code (SPEC 5: "the named record is absent").
            raise MailboxActorsError(type(self.actor).not_found, "no Post envelope has this key",
                                     details={"field": "key"})
        action = retry_action(JobState(rows[0][0]))
        now = tx.now_ms()
        if action is RetryAction.EXPEDITE:
            tx.exec("UPDATE post_jobs SET next_attempt_at_ms = ?, updated_at_ms = ? WHERE key = ?",
                    now, now, key)
        elif action is RetryAction.REQUEUE_BEHIND:
            # A fresh budget (runs); attempts, a count of invocations, never go down.
            tx.exec("UPDATE post_jobs SET seq = (SELECT max(seq) + 1 FROM post_jobs), "
                    "state = 'queued', runs = 0, reason = NULL, next_attempt_at_ms = ?, "
                    "updated_at_ms = ? WHERE key = ?", now, now, key)
        if action in (RetryAction.EXPEDITE, RetryAction.REQUEUE_BEHIND):
            self.ctx.schedule(self.purpose, now)
        return action

    def dead_letters(self, after: str | None = None, limit: int = 32) -> DeadLetterPage:
        """Dead letters in key order, scanning at most ``limit`` jobs (1..64); continue with
        ``after=next_cursor`` until it is None. A page may hold no letter and still continue."""
        rows = self.sql.exec(f"{RECORD_SQL} WHERE j.key > ? ORDER BY j.key LIMIT ?",
                             after or "", check_page_limit(limit)).all()
        return dead_letter_page(rows, limit)

    async def run(self) -> int:
        """The alarm purpose: deliver everything due, then arm the wake for what is left."""
        if self._executor is None:
            self._executor = PostExecutor(self, self.routes, self._send_one, clock=self.ctx.clock,
                                          rng=self.ctx.rng, policy=self.policy,
                                          deadline_ms=self._deadline_ms)
        return await self._executor.run()

    # ---- the store the executor drives -------------------------------------------------------

    async def claim(self, now_ms: int, lease_until_ms: int) -> list[list[Claimed]]:
        # Synchronous underneath: when nothing is due, the next wake is armed in the same
        # transaction that found nothing, with no await between that and the purpose's end.
        return self.sql.transaction_sync(functools.partial(self._claim, lease_until_ms))

    def _claim(self, lease_until_ms: int, tx: SqlStorage) -> list[list[Claimed]]:
        now = tx.now_ms()
        chains: list[list[Claimed]] = []
        wake: int | None = None
        for _ in range(8):  # a head settled dead here lets the next one of its address in
            heads = tx.exec(q.HEADS).all()
            retry = False
            for seq, state, next_at, lease, runs, akey in heads:
                verdict = eligibility(state, runs, next_at, lease, now, self.policy)
                if verdict is Eligibility.WAIT:
                    at = due_at(state, next_at, lease)
                    wake = at if wake is None else min(wake, at)
                    continue
                if verdict is Eligibility.SPENT:
                    s = settle_expired(runs, now, self.policy, self.ctx.rng.random())
                    tx.exec(q.SETTLE, s.state.value, s.next_attempt_at_ms, s.reason, None, now, seq)
                    retry = True
                    continue
                if any(c[0].seq == seq for c in chains):
                    continue  # claimed in an earlier pass of this loop
                if len(chains) >= ROUND_ADDRESSES:
                    wake = now if wake is None else min(wake, now)  # the next round takes it
                    continue
                chain = self._claim_chain(tx, akey, now, lease_until_ms)
                if chain:
                    chains.append(chain)
            if not retry:
                break
        if chains:  # recovery, armed before sending (or earlier, for a retry due before it)
            self.ctx.schedule(self.purpose, min(lease_until_ms + 1, wake or lease_until_ms + 1))
        elif wake is not None:
            self.ctx.schedule(self.purpose, wake)
        else:
            self.ctx.cancel(self.purpose)
        return chains

    def _claim_chain(self, tx: SqlStorage, akey: str, now: int, lease: int) -> list[Claimed]:
        """The head started, the due jobs right behind it read (started only once the head is
        delivered: ``start``)."""
        out: list[Claimed] = []
        for r in tx.exec(q.CHAIN, akey, CHAIN).all():
            if eligibility(r[13], r[16], r[14], r[15], now, self.policy) is not Eligibility.ATTEMPT:
                break
            out.append(claimed_of(r, self.routes, lease))
        if out:
            head = out[0]
            tx.exec(q.START, int(head.calls_next), lease, now, head.seq)
            head.mark_started(lease)
        return out

    async def start(self, job: Claimed, settled: list[tuple[Claimed, Settlement]]) -> bool:
        return self.sql.transaction_sync(functools.partial(self._start, job, settled))

    def _start(self, job: Claimed, settled: list[tuple[Claimed, Settlement]],
               tx: SqlStorage) -> bool:
        if not self._settle(list(settled), tx):
            return False  # a receipt hook failed: nothing behind it goes now
        if not tx.exec(q.START, int(job.calls_next), job.lease_until_ms, tx.now_ms(),
                       job.seq).rows_written:
            return False
        job.mark_started(job.lease_until_ms)
        return True

    async def save_prepared(self, job: Claimed, prepared: bytes) -> None:
        def run(tx: SqlStorage) -> None:
            tx.exec("UPDATE post_envelopes SET prepared = ? WHERE key = ? AND prepared IS NULL",
                    prepared.decode(), job.key)
            tx.exec("UPDATE post_jobs SET attempts = attempts + 1 WHERE seq = ?", job.seq)
        self.sql.transaction_sync(run)

    async def settle(self, results: list[tuple[Claimed, Settlement | None]]) -> None:
        done = [(job, s) for job, s in results if s is not None]
        if done:
            self.sql.transaction_sync(functools.partial(self._settle, done))

    def _settle(self, results: list[tuple[Claimed, Settlement]], tx: SqlStorage) -> bool:
        """Each settlement; False when a delivered job's receipt hook failed (that job then
        stays pending, to be retried: the receiver will answer duplicate)."""
        now = tx.now_ms()
        ok = True
        for job, s in results:
            if s.state is JobState.DELIVERED and self.on_delivered is not None:
                try:
                    tx.transaction_sync(functools.partial(self._deliver_hook, job, s))
                except Exception:
                    # Both stay pending: the job retries, the receiver answers duplicate, and the
                    # hook runs again.
                    ok = False
                    retry = settle_expired(job.runs, now, self.policy, self.ctx.rng.random())
                    tx.exec(q.SETTLE, retry.state.value, retry.next_attempt_at_ms,
                            "on_delivered_failed", None, now, job.seq)
                    continue
            tx.exec(q.SETTLE, *settle_values(job, s, now))
        return ok

    def _deliver_hook(self, job: Claimed, s: Settlement, tx: SqlStorage) -> None:
        assert self.on_delivered is not None
        self.on_delivered(tx, job.key, job.route, s.receipt)

    async def _deliver(self, job: Claimed, envelope: PostEnvelope, deadline_ms: int) -> Any:
        ctx = self.ctx
        object_id = ctx.id_from_name(job.namespace, job.object_name)
        # the attempt's deadline rides the envelope
        return await ctx.call(job.namespace, object_id,
                              PostDeliver(envelope=envelope, attempt=job.attempts),
                              tenant_id=job.tenant_id, identity_id=job.identity_id,
                              deadline_ms=deadline_ms)

    def _record(self, tx: SqlStorage, key: str) -> PostRecord:
        return record_of(tx.exec(f"{RECORD_SQL} WHERE j.key = ?", key).one())
