"""Post on PostgreSQL (PO-9): ``send(conn, ...)`` on the producer's open psycopg transaction, and
the same executor, settlement, receipts, dead letters and ordering as on actor SQLite.

Needs the ``postgres`` extra (psycopg 3 and psycopg-pool). Apply ``pg_schema.apply_schema`` first.
Claims take row locks (``FOR UPDATE SKIP LOCKED``), so several executors may share one database;
``purge_statements`` lock the selected envelopes before deleting them and their jobs. Receipt
hooks are not offered here: they would run outside the producer's transaction.
"""

from __future__ import annotations

from typing import Any

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool
except ImportError as e:  # pragma: no cover - the extra is installed wherever this is imported
    raise ImportError("Post on PostgreSQL needs: pip install 'mailbox-actors[postgres]'") from e

import msgspec

from mailbox_actors.core.post.order import Eligibility, eligibility, next_wake
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
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.rng import Rng
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
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.post import DeadLetterPage, PostRecord

__all__ = ["PostgresPost"]

_P = "('queued', 'running', 'failed')"
_HEADS = ("SELECT j.seq, j.state, j.next_attempt_at_ms, j.lease_until_ms, j.runs, "
          "j.address_key FROM post_jobs j JOIN (SELECT min(seq) AS s FROM post_jobs "
          f"WHERE state IN {_P} GROUP BY address_key) h ON j.seq = h.s")
_CHAIN = ("SELECT j.seq, j.key, e.route, e.kind, e.producer, e.namespace, e.object_name, "
          "e.tenant_id, e.identity_id, e.address, e.event, e.prepared, j.attempts, j.state, "
          "j.next_attempt_at_ms, j.lease_until_ms, j.runs FROM post_jobs j JOIN post_envelopes e "
          f"ON e.key = j.key WHERE j.address_key = %s AND j.state IN {_P} ORDER BY j.seq "
          "LIMIT %s FOR UPDATE OF j SKIP LOCKED")
_START = ("UPDATE post_jobs SET state = 'running', runs = runs + 1, attempts = attempts + %s, "
          f"lease_until_ms = %s, updated_at_ms = %s WHERE seq = %s AND state IN {_P}")
_SETTLE = ("UPDATE post_jobs SET state = %s, next_attempt_at_ms = coalesce(%s, "
           "next_attempt_at_ms), reason = %s, receipt = %s, lease_until_ms = NULL, "
           "updated_at_ms = %s WHERE seq = %s AND state = 'running'")

class PostgresPost:
    """Post whose envelopes live in PostgreSQL; ``run()`` delivers what is due. ``not_found``:
    the code an unknown key is answered with (by default the control data's, a tenant's)."""

    def __init__(self, pool: AsyncConnectionPool[Any], routes: Routes, deliver: Deliver, *,
                 clock: Clock, rng: Rng, policy: RetryPolicy | None = None,
                 producer: str = "postgres", attempt_deadline_ms: int = ATTEMPT_DEADLINE_MS,
                 not_found: ErrorCode = ErrorCode.TENANT_NOT_FOUND) -> None:
        self.pool = pool
        self.not_found = not_found
        self.routes = routes
        self.clock = clock
        self.rng = rng
        self.policy = policy or RetryPolicy()
        self.producer = producer
        self._executor = PostExecutor(self, routes, deliver, clock=clock, rng=rng,
                                      policy=self.policy, deadline_ms=attempt_deadline_ms)

    # ---- the producer's API ------------------------------------------------------------------

    async def send(self, conn: psycopg.AsyncConnection[Any], route: Route[Any, Any],
                   address: Any, event: Any, key: str) -> str:
        """On the producer's open transaction (``async with conn.transaction():``): write the
        envelope and its job; commits or rolls back with the producer. Returns the job's state.
        A replay with other content is ``conflict`` (the caller's transaction then rolls back)."""
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            raise RuntimeError("PostgresPost.send runs inside the producer's open transaction")
        if route not in self.routes:
            raise InvalidRequest("the route is not one of this Post's routes")
        check_key(key)
        addr, ev = route.check_address(address), route.check_event(event)
        dg = digest(route.name, addr, ev)
        now = self.clock.now_ms()
        cur = await conn.execute("SELECT digest FROM post_envelopes WHERE key = %s", (key,))
        prior = await cur.fetchone()
        if prior is not None and prior[0] != dg:
            raise MailboxActorsError(ErrorCode.CONFLICT, "this Post key was sent with other content",
                                     fix="Use a new key for a different event.")
        # The digest turns NULL on a conflicting concurrent replay: the NOT NULL failure aborts
        # the producer's whole transaction.
        await conn.execute(
            "INSERT INTO post_envelopes (key, route, kind, producer, namespace, object_name, "
            "tenant_id, identity_id, digest, address, event, created_at_ms) VALUES (%s, %s, %s, "
            "%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (key) DO UPDATE SET digest = CASE "
            "WHEN post_envelopes.digest = excluded.digest THEN post_envelopes.digest ELSE NULL "
            "END", (key, *envelope_values(route, address, (addr, ev, dg),
                                          producer=self.producer, now=now)))
        await conn.execute(
            "INSERT INTO post_jobs (key, address_key, state, attempts, next_attempt_at_ms, "
            "updated_at_ms) VALUES (%s, %s, 'queued', 0, %s, %s) ON CONFLICT (key) DO NOTHING",
            (key, address_key(route.address_kind, addr), now, now))
        row = await (await conn.execute("SELECT state FROM post_jobs WHERE key = %s",
                                        (key,))).fetchone()
        return str(row[0]) if row else JobState.QUEUED.value

    async def retry(self, conn: psycopg.AsyncConnection[Any], key: str) -> RetryAction:
        """Inside the caller's transaction, with the envelope locked first (PO-6)."""
        check_key(key)
        locked = await (await conn.execute(
            "SELECT key FROM post_envelopes WHERE key = %s FOR UPDATE", (key,))).fetchone()
        row = await (await conn.execute("SELECT state FROM post_jobs WHERE key = %s FOR UPDATE",
                                        (key,))).fetchone()
        if locked is None or row is None:
            raise MailboxActorsError(self.not_found, "no Post envelope has this key",
                                     details={"field": "key"})
        action = retry_action(JobState(row[0]))
        now = self.clock.now_ms()
        if action is RetryAction.EXPEDITE:
            await conn.execute("UPDATE post_jobs SET next_attempt_at_ms = %s, updated_at_ms = %s "
                               "WHERE key = %s", (now, now, key))
        elif action is RetryAction.REQUEUE_BEHIND:
            await conn.execute("UPDATE post_jobs SET seq = nextval('post_jobs_seq'), "
                               "state = 'queued', runs = 0, reason = NULL, "
                               "next_attempt_at_ms = %s, updated_at_ms = %s WHERE key = %s",
                               (now, now, key))
        return action

    async def get(self, key: str) -> PostRecord | None:
        return await self._one(f"{RECORD_SQL} WHERE j.key = %s", (key,))

    async def latest(self, kind: str, address: Any) -> PostRecord | None:
        akey = address_key(kind, msgspec.to_builtins(address))
        return await self._one(f"{RECORD_SQL} WHERE j.address_key = %s ORDER BY j.seq DESC LIMIT 1",
                               (akey,))

    async def dead_letters(self, after: str | None = None, limit: int = 32) -> DeadLetterPage:
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(
                f"{RECORD_SQL} WHERE j.key > %s ORDER BY j.key LIMIT %s",
                (after or "", check_page_limit(limit)))).fetchall()
        return dead_letter_page(rows, limit)

    @staticmethod
    def purge_statements(select_sql: str, params: tuple[Any, ...] = ()
                         ) -> list[tuple[str, tuple[Any, ...]]]:
        """Statements for the caller's transaction that remove the envelopes (and every job,
        settled or not) whose keys the trusted ``select_sql`` yields, locking the envelopes
        first so an overlapping retry cannot leave a job behind."""
        return [
            (f"SELECT key FROM post_envelopes WHERE key IN ({select_sql}) ORDER BY key "
             "FOR UPDATE", params),
            (f"DELETE FROM post_jobs WHERE key IN ({select_sql})", params),
            (f"DELETE FROM post_envelopes WHERE key IN ({select_sql})", params),
        ]

    async def run(self) -> int:
        """Deliver everything due now (the seed's execute + enqueue_due); returns deliveries."""
        return await self._executor.run()

    async def next_wake(self) -> int | None:
        """When the earliest pending head is due (None: nothing pending), for the host's wake."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(_HEADS)).fetchall()
        return next_wake((r[1], r[2], r[3]) for r in rows)

    async def _one(self, sql: str, params: tuple[Any, ...]) -> PostRecord | None:
        async with self.pool.connection() as conn:
            row = await (await conn.execute(sql, params)).fetchone()
        return record_of(row) if row else None

    # ---- the store the executor drives -------------------------------------------------------

    async def claim(self, now_ms: int, lease_until_ms: int) -> list[list[Claimed]]:
        async with self.pool.connection() as conn, conn.transaction():
            chains: list[list[Claimed]] = []
            for seq, state, next_at, lease, runs, akey in await (
                    await conn.execute(_HEADS)).fetchall():
                if len(chains) >= ROUND_ADDRESSES:
                    break
                verdict = eligibility(state, runs, next_at, lease, now_ms, self.policy)
                if verdict is Eligibility.WAIT:
                    continue
                if verdict is Eligibility.SPENT:
                    s = settle_expired(runs, now_ms, self.policy, self.rng.random())
                    await conn.execute(_SETTLE, (s.state.value, s.next_attempt_at_ms, s.reason,
                                                 None, now_ms, seq))
                    continue
                chain = await self._claim_chain(conn, akey, seq, now_ms, lease_until_ms)
                if chain:
                    chains.append(chain)
            return chains

    async def _claim_chain(self, conn: psycopg.AsyncConnection[Any], akey: str, head: int,
                           now: int, lease: int) -> list[Claimed]:
        """The head started; the due jobs behind it read, started one by one once their
        predecessor is delivered (``start``)."""
        rows = await (await conn.execute(_CHAIN, (akey, CHAIN))).fetchall()
        if not rows or rows[0][0] != head:
            return []  # another executor holds this address's head now
        out: list[Claimed] = []
        for r in rows:
            if eligibility(r[13], r[16], r[14], r[15], now, self.policy) is not Eligibility.ATTEMPT:
                break
            out.append(claimed_of(r, self.routes, lease))
        if out:
            await conn.execute(_START, (int(out[0].calls_next), lease, now, out[0].seq))
            out[0].mark_started(lease)
        return out

    async def start(self, job: Claimed, settled: list[tuple[Claimed, Settlement]]) -> bool:
        now = self.clock.now_ms()
        async with self.pool.connection() as conn, conn.transaction():
            for done, s in settled:
                await conn.execute(_SETTLE, settle_values(done, s, now))
            cur = await conn.execute(_START, (int(job.calls_next), job.lease_until_ms, now,
                                              job.seq))
            if cur.rowcount != 1:
                return False
        job.mark_started(job.lease_until_ms)
        return True

    async def save_prepared(self, job: Claimed, prepared: bytes) -> None:
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("UPDATE post_envelopes SET prepared = %s WHERE key = %s AND "
                               "prepared IS NULL", (prepared.decode(), job.key))
            await conn.execute("UPDATE post_jobs SET attempts = attempts + 1 WHERE seq = %s",
                               (job.seq,))

    async def settle(self, results: list[tuple[Claimed, Settlement | None]]) -> None:
        now = self.clock.now_ms()
        settles = [settle_values(job, s, now) for job, s in results if s is not None]
        if not settles:
            return
        async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.executemany(_SETTLE, settles)
