"""Which pending Post job may be attempted now (PO-3, PO-5), decided without I/O.

Only the head of an address (its pending job with the lowest ``seq``) and the pending jobs right
behind it are ever claimed; each is due when its retry time has come or, while running, when its
attempt's lease has passed (a crash or a lost answer). A running job whose lease passed with its
budget spent is not attempted again: it becomes a dead letter.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from mailbox_actors.core.post.rules import JobState, RetryPolicy

__all__ = ["Eligibility", "due_at", "eligibility", "next_wake"]


class Eligibility(enum.StrEnum):
    WAIT = "wait"            # not due yet
    ATTEMPT = "attempt"      # claim it: record an attempt and send
    SPENT = "spent"          # its last attempt expired with the budget spent: dead letter


def due_at(state: str, next_attempt_at_ms: int, lease_until_ms: int | None) -> int:
    """When a pending job may be attempted: its retry time, or just after its lease."""
    if state == JobState.RUNNING:
        return (lease_until_ms or 0) + 1
    return next_attempt_at_ms


def eligibility(state: str, runs: int, next_attempt_at_ms: int, lease_until_ms: int | None,
                now_ms: int, policy: RetryPolicy) -> Eligibility:
    """``runs``: the executor's tries so far (the retry budget's count, PO-12)."""
    if due_at(state, next_attempt_at_ms, lease_until_ms) > now_ms:
        return Eligibility.WAIT
    if state == JobState.RUNNING and runs >= policy.max_attempts:
        return Eligibility.SPENT
    return Eligibility.ATTEMPT


def next_wake(heads: Iterable[tuple[str, int, int | None]]) -> int | None:
    """The earliest time any address's head is due (None: nothing is pending)."""
    return min((due_at(s, n, lease) for s, n, lease in heads), default=None)
