"""Post's pure rules (PO-3, PO-5, PO-6): settlement, answers, retry actions, address keys."""

from __future__ import annotations

import pytest

from mailbox_actors.core.post.order import Eligibility, eligibility, next_wake
from mailbox_actors.core.post.rules import (
    Delivered,
    Failed,
    JobState,
    Refused,
    RetryAction,
    RetryPolicy,
    address_key,
    outcome_of_answer,
    outcome_of_error,
    retry_action,
    settle,
)

POLICY = RetryPolicy(max_attempts=3, base_ms=1_000, cap_ms=4_000, jitter=0.0)


def test_settlement_follows_the_outcome_and_the_budget() -> None:
    """PO-5: delivered keeps the receipt; a refusal is dead at once; a failure backs off
    exponentially (capped) until the budget is spent, then it is dead with the last reason."""
    assert settle(Delivered(False, {"a": 1}), 1, 0, POLICY, 0.0).receipt == {"a": 1}
    dead = settle(Refused("nope"), 1, 0, POLICY, 0.0)
    assert (dead.state, dead.reason) == (JobState.DEAD, "nope")
    first = settle(Failed("unavailable"), 1, 100, POLICY, 0.0)
    assert (first.state, first.next_attempt_at_ms) == (JobState.FAILED, 1_100)
    assert settle(Failed("x"), 2, 100, POLICY, 0.0).next_attempt_at_ms == 2_100
    spent = settle(Failed("timeout"), 3, 100, POLICY, 0.0)
    assert (spent.state, spent.reason) == (JobState.DEAD, "retry_budget_spent:timeout")
    capped = settle(Failed("x"), 10, 0, RetryPolicy(max_attempts=20, cap_ms=5_000), 0.0)
    assert capped.next_attempt_at_ms == 5_000


@pytest.mark.parametrize("answer", [None, 3, "delivered", [], {"status": "ok"},
                                    {"status": "delivered", "receipt": [1]},
                                    {"status": "delivered", "receipt": {"x": "y" * 5000}}])
def test_an_answer_that_is_not_a_post_answer_is_a_failed_attempt(answer: object) -> None:
    """PO-5 (bad input): a receiver answering garbage is a failed attempt, never a delivery."""
    assert outcome_of_answer(answer) == Failed("bad_answer")


def test_answers_and_errors_map_to_outcomes() -> None:
    """PO-4, PO-5: delivered/duplicate/refused answers; retryable codes and overloaded are
    failures to retry, other codes definite refusals."""
    assert outcome_of_answer({"status": "duplicate"}) == Delivered(True, None)
    assert outcome_of_answer({"status": "refused", "reason": "gone"}) == Refused("gone")
    assert outcome_of_error("unavailable", True) == Failed("unavailable")
    assert outcome_of_error("overloaded", False) == Failed("overloaded")
    assert outcome_of_error("tenant_not_found", False) == Refused("tenant_not_found")


def test_retry_actions_by_state() -> None:
    """PO-6: retry expedites a failed attempt, requeues a dead letter, leaves queued and
    running work alone and never reopens a delivered receipt."""
    assert retry_action(JobState.FAILED) is RetryAction.EXPEDITE
    assert retry_action(JobState.DEAD) is RetryAction.REQUEUE_BEHIND
    assert retry_action(JobState.QUEUED) is RetryAction.UNCHANGED
    assert retry_action(JobState.RUNNING) is RetryAction.UNCHANGED
    assert retry_action(JobState.DELIVERED) is RetryAction.DELIVERED


def test_address_keys_are_canonical_per_kind_and_hide_the_address() -> None:
    """PO-3: the ordering key of a recipient ignores field order, differs per kind label and
    does not show the address."""
    k = address_key("inbox", {"a": 1, "b": "alice@example.com"})
    assert k == address_key("inbox", {"b": "alice@example.com", "a": 1})
    assert k != address_key("mailbox", {"a": 1, "b": "alice@example.com"})
    assert "alice" not in k and len(k) == 32


def test_a_policy_that_cannot_work_is_refused() -> None:
    """PO-5: a retry policy without attempts or with a cap below its base is refused."""
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base_ms=10, cap_ms=5)


def test_a_job_is_due_at_its_retry_time_or_after_its_lease() -> None:
    """PO-3, PO-5: a queued or failed job waits for its retry time; a running one is due again
    just after its lease (a crash or a lost answer), unless its budget is spent (dead)."""
    p = RetryPolicy(max_attempts=3)
    assert eligibility("queued", 0, 100, None, 99, p) is Eligibility.WAIT
    assert eligibility("queued", 0, 100, None, 100, p) is Eligibility.ATTEMPT
    assert eligibility("failed", 2, 500, None, 499, p) is Eligibility.WAIT
    assert eligibility("running", 1, 0, 1_000, 1_000, p) is Eligibility.WAIT
    assert eligibility("running", 1, 0, 1_000, 1_001, p) is Eligibility.ATTEMPT
    assert eligibility("running", 3, 0, 1_000, 1_001, p) is Eligibility.SPENT
    assert next_wake([("queued", 300, None), ("running", 0, 200), ("failed", 250, None)]) == 201
    assert next_wake([]) is None
