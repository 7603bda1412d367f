"""DomainMonitor's state machine (DM-3, DM-4), pure: states, hysteresis, expiry, check schedule."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mailbox_actors.core.dns.lifecycle import HOUR_MS, LifecycleRules, apply_check
from mailbox_actors.wire.domain import DomainState, Verdict

R = LifecycleRules(fail_after=3)
T0 = 1_000_000
P, F, U = Verdict.PASS, Verdict.FAIL, Verdict.UNKNOWN


def run(verdicts: list[Verdict], state: DomainState = DomainState.PENDING, step_ms: int = 60_000,
        rules: LifecycleRules = R) -> list[tuple[DomainState, str | None]]:
    out = []
    failures, now = 0, T0
    for v in verdicts:
        now += step_ms
        t = apply_check(state, failures, v, now, T0, rules)
        state, failures = t.state, t.consecutive_failures
        out.append((state, t.event))
    return out


def test_pending_verifies_on_the_first_pass() -> None:
    """DM-3/DM-4: pending stays pending on fail or unknown and becomes verified on a pass, with
    domain.verified."""
    assert run([F, U, P]) == [(DomainState.PENDING, None), (DomainState.PENDING, None),
                              (DomainState.VERIFIED, "domain.verified")]


def test_verified_fails_only_after_n_consecutive_failures_and_recovers() -> None:
    """DM-3/DM-4: a verified domain becomes failing only at the Nth failed run in a row (a pass
    between resets the count; unknown neither counts nor resets), emitting domain.failing once;
    a pass then recovers it with domain.recovered."""
    states = run([P, F, F, P, F, U, F, U, F, F, P])
    assert [s for s, _ in states] == [
        DomainState.VERIFIED, DomainState.VERIFIED, DomainState.VERIFIED, DomainState.VERIFIED,
        DomainState.VERIFIED, DomainState.VERIFIED, DomainState.VERIFIED, DomainState.VERIFIED,
        DomainState.FAILING, DomainState.FAILING, DomainState.VERIFIED]
    assert [e for _, e in states if e] == ["domain.verified", "domain.failing", "domain.recovered"]


def test_pending_expires_to_failed_after_72_hours_and_a_later_pass_verifies() -> None:
    """DM-3: a pending domain that has not passed by 72 h after init becomes failed
    (domain.failed) at the first failed run from then on, with no more periodic checks (an unknown
    run at the expiry leaves it pending: a timeout never fails a domain); the check before the
    expiry is scheduled at the expiry itself; a later pass (a manual check) verifies it."""
    t = apply_check(DomainState.PENDING, 0, F, T0 + 72 * HOUR_MS - 60_000, T0, R)
    assert t.state is DomainState.PENDING and t.next_check_ms == T0 + 72 * HOUR_MS
    t = apply_check(DomainState.PENDING, 0, U, T0 + 72 * HOUR_MS, T0, R)
    assert (t.state, t.event) == (DomainState.PENDING, None)  # DNS unreadable: still in doubt
    assert t.next_check_ms == T0 + 72 * HOUR_MS + R.check_pending_ms
    t = apply_check(DomainState.PENDING, 0, F, T0 + 72 * HOUR_MS, T0, R)
    assert (t.state, t.event, t.next_check_ms) == (DomainState.FAILED, "domain.failed", None)
    t = apply_check(DomainState.FAILED, 0, F, T0 + 80 * HOUR_MS, T0, R)
    assert (t.state, t.event) == (DomainState.FAILED, None)
    t = apply_check(DomainState.FAILED, 0, P, T0 + 90 * HOUR_MS, T0, R)
    assert (t.state, t.event) == (DomainState.VERIFIED, "domain.verified")


def test_checks_run_often_while_in_doubt_and_daily_once_verified() -> None:
    """DM-3: the next check is check_pending_ms away while pending, failing, or after a failed or
    unknown run of a verified domain; check_verified_ms after a clean pass."""
    now = T0 + 10
    assert apply_check(DomainState.PENDING, 0, F, now, T0, R).next_check_ms == now + 300_000
    assert apply_check(DomainState.PENDING, 0, P, now, T0, R).next_check_ms == now + 24 * HOUR_MS
    assert apply_check(DomainState.VERIFIED, 0, U, now, T0, R).next_check_ms == now + 300_000
    assert apply_check(DomainState.VERIFIED, 0, F, now, T0, R).next_check_ms == now + 300_000
    assert apply_check(DomainState.FAILING, 3, F, now, T0, R).next_check_ms == now + 300_000


@given(st.lists(st.sampled_from([P, F, U]), max_size=40), st.integers(1, 5))
@settings(deadline=None, derandomize=True)
def test_unknown_runs_never_change_anything(verdicts: list[Verdict], n: int) -> None:
    """DM-2/DM-3: inserting unknown runs anywhere in a history changes no state and no event, and
    a failing state is always preceded by N failed runs since the last pass."""
    rules = LifecycleRules(fail_after=n)
    plain = [x for x in run(verdicts, rules=rules)]
    with_unknowns: list[Verdict] = []
    for v in verdicts:
        with_unknowns += [U, v]
    mixed = run(with_unknowns, rules=rules)[1::2]
    assert [s for s, _ in mixed] == [s for s, _ in plain]
    assert [e for _, e in mixed] == [e for _, e in plain]
    since_pass = 0
    for v, (state, event) in zip(verdicts, plain, strict=True):
        since_pass = 0 if v is P else since_pass + (v is F)
        if event == "domain.failing":
            assert since_pass == n and state is DomainState.FAILING
