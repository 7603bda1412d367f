"""Post on the control database (PO-8, the seed's D1): statements for the producer's own batch.

``send`` returns the envelope and job statements; the producer puts them in the same
``ControlDb.batch`` as its own fact, so they commit together or not at all. ``send_from_select``
does the same for rows a trusted SELECT yields inside that batch. A replay of a key with other
content fails the batch (a NOT NULL constraint: ``conflict``) and rolls all of it back.
``purge_statements`` remove envelopes and every job alongside a source erasure. ``run()`` is the
shared executor; the host keeps its wake. Apply ``POST_SCHEMA`` through the control database's
migrations (``ControlDb(migrations=(*MIGRATIONS, *POST_MIGRATIONS))``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import aiosqlite
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
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.rng import Rng
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
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.post import DeadLetterPage, PostRecord

__all__ = ["ControlPost", "Statement"]

Statement = tuple[str, tuple[Any, ...]]
# A bare ``?`` outside quoted text: send_from_select takes ``?NNN`` only (the seed's contract).
_PLAIN_PARAMETER = re.compile(r"\?(?!\d)")
_NUMBERED_PARAMETER = re.compile(r"\?(\d+)")
_SQL_TEXT = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")



class ControlPost:
    """Post whose envelopes live in the control database. ``not_found``: the code an unknown key
    is answered with (SPEC 5 has no code of Post's own: by default the control data's, a
    tenant's)."""

    def __init__(self, db: ControlDb, routes: Routes, deliver: Deliver, *, clock: Clock, rng: Rng,
                 policy: RetryPolicy | None = None, producer: str = "control",
                 attempt_deadline_ms: int = ATTEMPT_DEADLINE_MS,
                 not_found: ErrorCode = ErrorCode.TENANT_NOT_FOUND) -> None:
        self.db = db
        self.not_found = not_found
        self.routes = routes
        self.clock = clock
        self.rng = rng
        self.policy = policy or RetryPolicy()
        self.producer = producer
        self._executor = PostExecutor(self, routes, deliver, clock=clock, rng=rng,
                                      policy=self.policy, deadline_ms=attempt_deadline_ms)

    # ---- statements for the producer's batch -------------------------------------------------

    def send(self, route: Route[Any, Any], address: Any, event: Any, key: str) -> list[Statement]:
        """The envelope and job statements for the producer's ``batch``; nothing is written
        here. An event that does not match the route's schema is ``invalid_request`` now."""
        if route not in self.routes:
            raise InvalidRequest("the route is not one of this Post's routes")
        check_key(key)
        addr, ev = route.check_address(address), route.check_event(event)
        now = self.clock.now_ms()
        return [
            (q.ENVELOPE_INSERT, (key, *envelope_values(
                route, address, (addr, ev, digest(route.name, addr, ev)),
                producer=self.producer, now=now))),
            (q.JOB_INSERT, (key, address_key(route.address_kind, addr), now, now)),
        ]

    @staticmethod
    def address_key(route: Route[Any, Any], address: Any) -> str:
        """The ordering key of ``address`` for ``send_from_select`` rows (bind it as a value)."""
        return address_key(route.address_kind, route.check_address(address))

    def send_from_select(self, route: Route[Any, Any], select_sql: str,
                         params: Sequence[Any] = ()) -> list[Statement]:
        """Statements that send one envelope per row of a trusted native SQLite SELECT run inside
        the same batch, for facts the batch itself creates (PO-8, PO-11: the seed's
        ``sendFromSelect``). Its parameters are ``?NNN``: ``params[0]`` binds ``?1`` and so on;
        Post's own values are numbered after the caller's, so they never share its numbering.
        Its columns: ``post_key``; ``envelope_json``, a JSON object ``{"address": {...},
        "event": {...}}`` of the route's schemas; ``queue_name``, the ordering key (use
        ``address_key(route, address)`` to order behind ``send``'s envelopes to that address);
        ``next_attempt_at`` (ms, NULL for now); ``job_id``, kept with the job. Rows are queued
        in the SELECT's order. Trusted: the JSON is not checked here (the receiver refuses what
        does not match the route), and the object is named from the address when it is sent."""
        if route not in self.routes:
            raise InvalidRequest("the route is not one of this Post's routes")
        code = _SQL_TEXT.sub("''", select_sql)
        if _PLAIN_PARAMETER.search(code):
            raise InvalidRequest("send_from_select takes ?NNN parameters (?1, ?2, ...), not ?",
                                 details={"field": "select_sql"})
        used = max((int(n) for n in _NUMBERED_PARAMETER.findall(code)), default=0)
        if used > len(params):
            raise InvalidRequest(f"the SELECT uses ?{used} but {len(params)} values are given",
                                 details={"field": "params"})
        own = len(params)  # Post's own values: ?{own + 1} onwards

        def p(i: int) -> str:
            return f"?{own + i}"

        now = self.clock.now_ms()
        envelope = (
            "INSERT INTO post_envelopes (key, route, kind, producer, namespace, object_name, "
            "tenant_id, identity_id, digest, address, event, created_at_ms) SELECT s.post_key, "
            f"{p(1)}, {p(2)}, {p(3)}, {p(4)}, '', NULL, NULL, 'select:' || s.envelope_json, "
            "json_extract(s.envelope_json, '$.address'), json_extract(s.envelope_json, "
            f"'$.event'), {p(5)} FROM ({select_sql}) AS s WHERE true "
            "ON CONFLICT (key) DO UPDATE SET digest = CASE WHEN post_envelopes.digest = "
            "excluded.digest THEN post_envelopes.digest ELSE NULL END")
        job = (
            "INSERT INTO post_jobs (seq, key, address_key, state, attempts, next_attempt_at_ms, "
            "updated_at_ms, job_id) SELECT (SELECT coalesce(max(seq), 0) FROM post_jobs) + "
            "row_number() OVER (), s.post_key, s.queue_name, 'queued', 0, "
            f"coalesce(s.next_attempt_at, {p(1)}), {p(1)}, s.job_id "
            f"FROM ({select_sql}) AS s WHERE true ON CONFLICT (key) DO NOTHING")
        return [(envelope, (*params, route.name, route.address_kind, self.producer,
                            route.namespace, now)),
                (job, (*params, now))]

    @staticmethod
    def purge_statements(select_sql: str, params: tuple[Any, ...] = ()) -> list[Statement]:
        """Remove the envelopes whose keys the trusted ``select_sql`` yields, and every job of
        theirs (settled ones included), in the caller's batch (one writer at a time: the batch's
        ``BEGIN IMMEDIATE`` is the lock)."""
        return [(f"DELETE FROM post_jobs WHERE key IN ({select_sql})", params),
                (f"DELETE FROM post_envelopes WHERE key IN ({select_sql})", params)]

    def retry_statements(self, key: str) -> list[Statement]:
        """retry(key) as statements for a batch (PO-6): expedite a failed job, put a dead letter
        behind the queued work; queued, running and delivered jobs are untouched."""
        check_key(key)
        now = self.clock.now_ms()
        return [
            ("UPDATE post_jobs SET next_attempt_at_ms = ?, updated_at_ms = ? "
             "WHERE key = ? AND state = 'failed'", (now, now, key)),
            ("UPDATE post_jobs SET seq = (SELECT max(seq) + 1 FROM post_jobs), state = 'queued', "
             "runs = 0, reason = NULL, next_attempt_at_ms = ?, updated_at_ms = ? "
             "WHERE key = ? AND state = 'dead'", (now, now, key)),
        ]

    async def retry(self, key: str) -> RetryAction:
        """retry(key) in a transaction of its own; answers what it did."""
        async def run(conn: aiosqlite.Connection) -> RetryAction:
            rows = list(await conn.execute_fetchall(
                "SELECT state FROM post_jobs WHERE key = ?", (check_key(key),)))
            if not rows:
                raise MailboxActorsError(self.not_found, "no Post envelope has this key",
                                         details={"field": "key"})
            for sql, params in self.retry_statements(key):
                await conn.execute(sql, params)
            return retry_action(JobState(rows[0][0]))
        return await self.db.transaction(run)

    # ---- reading -------------------------------------------------------------------------------

    async def get(self, key: str) -> PostRecord | None:
        row = await self.db.fetch_one(f"{RECORD_SQL} WHERE j.key = ?", (key,))
        return record_of(row) if row else None

    async def latest(self, kind: str, address: Any) -> PostRecord | None:
        akey = address_key(kind, msgspec.to_builtins(address))
        row = await self.db.fetch_one(
            f"{RECORD_SQL} WHERE j.address_key = ? ORDER BY j.seq DESC LIMIT 1", (akey,))
        return record_of(row) if row else None

    async def dead_letters(self, after: str | None = None, limit: int = 32) -> DeadLetterPage:
        rows = await self.db.fetch_all(f"{RECORD_SQL} WHERE j.key > ? ORDER BY j.key LIMIT ?",
                                       (after or "", check_page_limit(limit)))
        return dead_letter_page(rows, limit)

    async def next_wake(self) -> int | None:
        rows = await self.db.fetch_all(q.HEADS)
        return next_wake((r[1], r[2], r[3]) for r in rows)

    async def run(self) -> int:
        """Deliver everything due now; returns how many were delivered."""
        return await self._executor.run()

    # ---- the store the executor drives -------------------------------------------------------

    async def claim(self, now_ms: int, lease_until_ms: int) -> list[list[Claimed]]:
        return await self.db.transaction(functools.partial(self._claim, now_ms, lease_until_ms))

    async def _claim(self, now: int, lease: int, conn: aiosqlite.Connection) -> list[list[Claimed]]:
        chains: list[list[Claimed]] = []
        for seq, state, next_at, old_lease, runs, akey in await conn.execute_fetchall(q.HEADS):
            if len(chains) >= ROUND_ADDRESSES:
                break
            verdict = eligibility(state, runs, next_at, old_lease, now, self.policy)
            if verdict is Eligibility.WAIT:
                continue
            if verdict is Eligibility.SPENT:
                s = settle_expired(runs, now, self.policy, self.rng.random())
                await conn.execute(q.SETTLE, (s.state.value, s.next_attempt_at_ms, s.reason, None,
                                              now, seq))
                continue
            chain: list[Claimed] = []
            for r in await conn.execute_fetchall(q.CHAIN, (akey, CHAIN)):
                if eligibility(r[13], r[16], r[14], r[15], now,
                               self.policy) is not Eligibility.ATTEMPT:
                    break
                chain.append(self._resolved(claimed_of(r, self.routes, lease)))
            if chain:
                head = chain[0]
                await conn.execute(q.START, (int(head.calls_next), lease, now, head.seq))
                head.mark_started(lease)
                chains.append(chain)
        return chains

    def _resolved(self, job: Claimed) -> Claimed:
        """A ``send_from_select`` row names no object: its route names it from the address."""
        route = self.routes.get(job.route)
        if job.object_name == "" and route is not None:
            try:
                address = msgspec.json.decode(job.address, type=route.address)
            except msgspec.ValidationError:
                return job  # the receiver's side refuses what does not match the route
            job.object_name = route.object_name(address)
            job.tenant_id = route.tenant_of(address) if route.tenant_of else None
            job.identity_id = route.identity_of(address) if route.identity_of else None
        return job

    async def start(self, job: Claimed, settled: list[tuple[Claimed, Settlement]]) -> bool:
        async def run(conn: aiosqlite.Connection) -> bool:
            now = self.clock.now_ms()
            for done, s in settled:
                await conn.execute(q.SETTLE, settle_values(done, s, now))
            cur = await conn.execute(q.START, (int(job.calls_next), job.lease_until_ms, now,
                                               job.seq))
            if cur.rowcount != 1:
                return False
            job.mark_started(job.lease_until_ms)
            return True
        return await self.db.transaction(run)

    async def save_prepared(self, job: Claimed, prepared: bytes) -> None:
        await self.db.batch([("UPDATE post_envelopes SET prepared = ? WHERE key = ? AND "
                              "prepared IS NULL", (prepared.decode(), job.key)),
                             ("UPDATE post_jobs SET attempts = attempts + 1 WHERE seq = ?",
                              (job.seq,))])

    async def settle(self, results: list[tuple[Claimed, Settlement | None]]) -> None:
        now = self.clock.now_ms()
        stmts: list[Statement] = [(q.SETTLE, settle_values(job, s, now))
                                  for job, s in results if s is not None]
        if stmts:
            await self.db.batch(stmts)
