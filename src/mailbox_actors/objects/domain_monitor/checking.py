"""DomainMonitor's checks (DM-2, DM-3): ask DNS, let ``core.dns`` judge, apply the transition.

The questions of one run go out concurrently: MX, DMARC, DKIM and the SPF planner's first round;
then the SPF planner's further rounds (includes, redirects, the a/mx/exists terms it counts) until
it decides; then, for a domain without a DMARC record, its organizational domain's. DNS is asked
outside any transaction; the verdicts, the new state, its event and the next check are written in
one. Nothing in a run raises: a resolver that fails in any way is an
unknown answer, so ``alarm:check`` always re-arms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio
import msgspec

from mailbox_actors.core.dns.answers import Answer, Outcome, Query
from mailbox_actors.core.dns.checks import (
    check_dkim,
    check_dmarc,
    check_mx,
    dkim_query,
    dmarc_fallback_query,
    dmarc_query,
    mx_query,
)
from mailbox_actors.core.dns.lifecycle import LifecycleRules, apply_check
from mailbox_actors.core.dns.results import combine, unknown
from mailbox_actors.core.dns.spf import evaluate_spf
from mailbox_actors.objects.domain_monitor.setup import LAST_CHECKS, load_expected
from mailbox_actors.objects.notify_routes import NOTIFY, NOTIFY_KINDS
from mailbox_actors.platform.dns.public_suffix import organizational_domain
from mailbox_actors.platform.dns.resolver import RESOLVER, Resolver
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.domain import (
    CheckReply,
    CheckRun,
    DomainState,
    ExpectedRecords,
    RecordCheck,
)
from mailbox_actors.wire.notifier import DomainStateChanged, NotifierAddress

if TYPE_CHECKING:
    from mailbox_actors.post.actor_post import Post
    from mailbox_actors.runtime.context import ActorContext

__all__ = ["SPF_ROUNDS", "ask_all", "check_now", "evaluate"]

SPF_ROUNDS = 12  # an SPF tree within the lookup limit needs at most 11 rounds
_ENC = msgspec.json.Encoder()
_MARGIN_MS = 500


async def _ask(resolver: Resolver, q: Query, into: dict[Query, Answer]) -> None:
    try:
        into[q] = await resolver.resolve(*q)
    except Exception as e:  # a resolver breaking its contract is still only an unknown answer
        into[q] = Answer(q[0], q[1], Outcome.ERROR, detail=f"resolver raised {type(e).__name__}")


async def ask_all(resolver: Resolver, queries: Iterable[Query], answers: dict[Query, Answer],
                  stop_at: float = math.inf) -> None:
    """Ask every query not answered yet, concurrently; one still out at ``stop_at`` (event-loop
    time) is a TIMEOUT answer, so a check always ends within its request's deadline."""
    wanted = [q for q in dict.fromkeys(queries) if q not in answers]
    with anyio.move_on_at(stop_at):
        async with anyio.create_task_group() as tg:
            for q in wanted:
                tg.start_soon(_ask, resolver, q, answers)
    for q in wanted:
        if q not in answers:
            answers[q] = Answer(q[0], q[1], Outcome.TIMEOUT,
                                detail="the check's request deadline came first")


async def evaluate(resolver: Resolver, domain: str, expected: ExpectedRecords,
                   budget_s: float | None = None) -> list[RecordCheck]:
    """Every check's verdict for the domain now (DM-2), within ``budget_s`` seconds if given."""
    stop_at = math.inf if budget_s is None else anyio.current_time() + budget_s
    answers: dict[Query, Answer] = {}
    dkim_q = dkim_query(domain, expected.dkim_selector) if expected.dkim_selector else None
    first = [mx_query(domain), dmarc_query(domain), *([dkim_q] if dkim_q else [])]
    plan = evaluate_spf(domain, expected.spf_include, answers)
    await ask_all(resolver, [*first, *plan.queries], answers, stop_at)
    for _ in range(SPF_ROUNDS):
        plan = evaluate_spf(domain, expected.spf_include, answers)
        if plan.result is not None:
            break
        await ask_all(resolver, plan.queries, answers, stop_at)
    spf = plan.result or unknown("spf", "spf_incomplete",
                                 f"the SPF records of {domain} needed more than {SPF_ROUNDS} "
                                 "rounds of lookups; the check is retried")
    results = [check_mx(answers[mx_query(domain)], expected.mx_hosts), spf]
    if expected.dkim_selector:
        results.append(check_dkim(answers.get(dkim_q) if dkim_q else None,
                                  expected.dkim_selector, expected.dkim_key))
    dmarc = answers[dmarc_query(domain)]
    # Only a domain without a record of its own asks its organizational domain (RFC 7489 6.6.3).
    fallback_q = dmarc_fallback_query(domain, await organizational_domain(domain), dmarc)
    if fallback_q is not None:
        await ask_all(resolver, [fallback_q], answers, stop_at)
    results.append(check_dmarc(dmarc, answers[fallback_q] if fallback_q else None))
    return results


def _budget_s(ctx: ActorContext) -> float | None:
    """How long DNS may take: the request's deadline less a margin for the transaction (an alarm
    run has no deadline: the resolver's own timeouts bound it)."""
    deadline = ctx.deadline_ms
    if deadline is None:
        return None
    return max(0.0, (deadline - ctx.clock.now_ms() - _MARGIN_MS) / 1000)


def _rules(ctx: ActorContext) -> LifecycleRules:
    s = ctx.settings
    return LifecycleRules(fail_after=s.domain_fail_after,
                          pending_expiry_ms=s.domain_pending_expiry_ms,
                          check_pending_ms=s.domain_check_pending_ms,
                          check_verified_ms=s.domain_check_verified_ms)


async def check_now(ctx: ActorContext, sql: SqlStorage, post: Post) -> CheckReply:
    """One run: the checks, then the state transition, its event and the next check (DM-3)."""
    name, blob = sql.exec("SELECT name, expected FROM domain WHERE id = 1").one()
    resolver = ctx.service(RESOLVER)
    if resolver is None:  # the node always registers one; an embedding without is in doubt
        results = [unknown("dns", "dns_no_resolver",
                           "the node has no DNS resolver; nothing was checked")]
    else:
        try:
            results = await evaluate(resolver, name, load_expected(blob), _budget_s(ctx))
        except Exception as e:  # a bug in a check must not stop the monitor: retried later
            ctx.log.error("domain_check_failed", object_id=ctx.id,
                                error=type(e).__name__)
            results = [unknown("dns", "check_error", "the check failed unexpectedly and is "
                               "retried; the domain's state is unchanged")]
    return sql.transaction_sync(lambda tx: _apply(ctx, tx, post, results))


def _apply(ctx: ActorContext, tx: SqlStorage, post: Post, results: list[RecordCheck]
           ) -> CheckReply:
    name, state, failures, created = tx.exec(
        "SELECT name, state, consecutive_failures, created_at_ms FROM domain WHERE id = 1").one()
    before = DomainState(state)
    verdict = combine(results)
    now = tx.now_ms()
    t = apply_check(before, failures, verdict, now, created, _rules(ctx))
    tx.exec("UPDATE domain SET state = ?, consecutive_failures = ?, last_results = ?, "
            "last_check_ms = ? WHERE id = 1", t.state.value, t.consecutive_failures,
            _ENC.encode(results), now)
    run = CheckRun(at_ms=now, verdict=verdict, state=t.state, results=results)
    tx.exec("INSERT INTO checks (at_ms, run) VALUES (?, ?)", now, _ENC.encode(run))
    tx.exec("DELETE FROM checks WHERE id <= (SELECT max(id) FROM checks) - ?", LAST_CHECKS)
    if t.event is not None:
        event = ctx.emit(tx, t.event, {"state": t.state.value, "previous_state": before.value})
        kind = NOTIFY_KINDS.get(t.event)
        if kind is not None:  # OBJ-4: to the tenant's Notifier, with this change
            post.send(tx, NOTIFY, NotifierAddress(ctx.owner_tenant or ""),
                      DomainStateChanged(domain=name, kind=kind, state=t.state.value, at_ms=now),
                      f"domain:{event.id}")
    if t.next_check_ms is None:
        ctx.cancel("check")
    else:
        ctx.schedule("check", t.next_check_ms)
    return CheckReply(state=t.state, verdict=verdict,
                      consecutive_failures=t.consecutive_failures, results=results)
