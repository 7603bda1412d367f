"""A domain's states and hysteresis (DM-3), as one pure transition per check run.

    pending --pass--> verified --N fails in a row--> failing --pass--> verified
    pending --a failed run at or after the expiry (72 h)--> failed --a later pass--> verified

An unknown run moves nothing: it neither counts as a failure nor resets the count, so a resolver
outage can never fail a domain, and one flaky answer cannot flap it. The transition also says when
to check next: often while pending, failing or in doubt; daily once verified and clean.
"""

from __future__ import annotations

import msgspec

from mailbox_actors.wire.domain import DomainState, Verdict

__all__ = ["EVENT_FOR", "LifecycleRules", "Transition", "apply_check"]

HOUR_MS = 3_600_000


class LifecycleRules(msgspec.Struct, frozen=True, kw_only=True):
    fail_after: int = 3  # consecutive failed runs before verified becomes failing
    pending_expiry_ms: int = 72 * HOUR_MS
    check_pending_ms: int = 300_000  # also while failing, or after a failed or unknown run
    check_verified_ms: int = 24 * HOUR_MS


class Transition(msgspec.Struct, frozen=True):
    state: DomainState
    consecutive_failures: int
    event: str | None  # "domain.verified", ... when the state changed
    next_check_ms: int | None  # None: no periodic check (failed)


EVENT_FOR: dict[tuple[DomainState, DomainState], str] = {
    (DomainState.PENDING, DomainState.VERIFIED): "domain.verified",
    (DomainState.FAILED, DomainState.VERIFIED): "domain.verified",
    (DomainState.VERIFIED, DomainState.FAILING): "domain.failing",
    (DomainState.FAILING, DomainState.VERIFIED): "domain.recovered",
    (DomainState.PENDING, DomainState.FAILED): "domain.failed",
}


def _next_state(state: DomainState, failures: int, verdict: Verdict, now_ms: int,
                created_at_ms: int, rules: LifecycleRules) -> tuple[DomainState, int]:
    if verdict is Verdict.PASS:
        return DomainState.VERIFIED, 0
    if state is DomainState.PENDING:
        # Only a definite failure ends a pending domain: one whose DNS could not be read at the
        # expiry stays pending until a run says something about it.
        expired = now_ms >= created_at_ms + rules.pending_expiry_ms
        return (DomainState.FAILED if expired and verdict is Verdict.FAIL else state), 0
    if verdict is Verdict.UNKNOWN or state is DomainState.FAILED:
        return state, failures
    failures += 1
    if state is DomainState.VERIFIED and failures >= rules.fail_after:
        return DomainState.FAILING, failures
    return state, failures


def apply_check(state: DomainState, consecutive_failures: int, verdict: Verdict, now_ms: int,
                created_at_ms: int, rules: LifecycleRules) -> Transition:
    """The state after one run of the checks with ``verdict`` at ``now_ms``."""
    new, failures = _next_state(state, consecutive_failures, verdict, now_ms, created_at_ms, rules)
    if new is DomainState.FAILED:
        nxt: int | None = None
    elif new is DomainState.PENDING:
        # the last check of a pending domain runs at its expiry, so it fails on time
        expiry = created_at_ms + rules.pending_expiry_ms
        nxt = now_ms + rules.check_pending_ms if now_ms >= expiry else min(
            now_ms + rules.check_pending_ms, expiry)
    elif new is DomainState.VERIFIED and failures == 0 and verdict is Verdict.PASS:
        nxt = now_ms + rules.check_verified_ms
    else:
        nxt = now_ms + rules.check_pending_ms
    return Transition(new, failures, EVENT_FOR.get((state, new)), nxt)
