"""What happens to a Post job after each step (PO-3, PO-5, PO-6), decided without I/O.

A job is ``queued`` when sent, ``running`` while an attempt is out (its lease is the ten-second
attempt deadline), ``failed`` when an attempt failed and a retry waits for its backoff, and ends
``delivered`` or ``dead``. The pending states hold every later job to the same address (PO-3).

Two counts (PO-12): a job's ``attempts`` are receiver invocations (what the operator sees; it
never goes down, except that a dead letter put back in line starts afresh); its ``runs`` are the
executor's tries (an invocation, or a preparation that failed or expired before the call), and
the retry budget and backoff are spent by runs. A letter held behind an undelivered predecessor
is neither tried nor invoked, so it spends nothing.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from mailbox_actors.core.backoff import exponential_delay_ms

__all__ = ["ATTEMPT_DEADLINE_MS", "PENDING", "AttemptOutcome", "Delivered", "Failed", "JobState",
           "Refused", "RetryAction", "RetryPolicy", "Settlement", "address_key", "canonical_json",
           "outcome_of_answer", "outcome_of_error", "retry_action", "settle", "settle_expired"]

ATTEMPT_DEADLINE_MS = 10_000  # preparation and the receiver's answer share it (PO-5)


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FAILED = "failed"
    DELIVERED = "delivered"
    DEAD = "dead"


PENDING = (JobState.QUEUED, JobState.RUNNING, JobState.FAILED)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long Post retries one envelope before it becomes a dead letter."""

    max_attempts: int = 8
    base_ms: int = 1_000
    cap_ms: int = 300_000
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_ms < 1 or self.cap_ms < self.base_ms:
            raise ValueError("RetryPolicy needs max_attempts >= 1 and 1 <= base_ms <= cap_ms")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("RetryPolicy.jitter is a fraction in [0, 1]")


# ---- what an attempt came to ---------------------------------------------------------------


@dataclass(frozen=True)
class Delivered:
    """The receiver admitted the envelope now, or had before (``duplicate``)."""

    duplicate: bool
    receipt: dict[str, Any] | None


@dataclass(frozen=True)
class Refused:
    """A definite refusal: retrying the same envelope cannot succeed. The receiver's receipt, if
    it gave one, is kept on the dead letter (PO-12)."""

    reason: str
    receipt: dict[str, Any] | None = None


@dataclass(frozen=True)
class Failed:
    """The attempt may or may not have reached the receiver: retry the same envelope. A receipt
    the receiver gave with its failure is kept (and on the dead letter once the budget is spent)."""

    reason: str
    receipt: dict[str, Any] | None = None


AttemptOutcome = Delivered | Refused | Failed

_MAX_RECEIPT_BYTES = 4096
_ENC = msgspec.json.Encoder()


def outcome_of_answer(answer: object) -> AttemptOutcome:
    """The receiver's ``ok`` value: ``{"status": "delivered"|"duplicate"|"refused"|"failed",
    "receipt", "reason"}``. Anything else is garbage, a failed attempt, never a delivery."""
    if not isinstance(answer, dict):
        return Failed("bad_answer")
    status = answer.get("status")
    receipt = answer.get("receipt")
    if receipt is not None and (not isinstance(receipt, dict)
                                or len(_ENC.encode(receipt)) > _MAX_RECEIPT_BYTES):
        return Failed("bad_answer")
    if status in ("delivered", "duplicate"):
        return Delivered(status == "duplicate", receipt)
    reason = answer.get("reason")
    if status == "refused":
        return Refused(reason[:200] if isinstance(reason, str) and reason else "refused", receipt)
    if status == "failed":
        return Failed(reason[:200] if isinstance(reason, str) and reason else "failed", receipt)
    return Failed("bad_answer")


def outcome_of_error(code: str, retryable: bool) -> AttemptOutcome:
    """An error answer: a code the table calls permanent is a refusal, except ``overloaded``
    (not to be retried at once, but later)."""
    if retryable or code == "overloaded":
        return Failed(code)
    return Refused(code)


# ---- settlement ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Settlement:
    state: JobState
    next_attempt_at_ms: int | None
    reason: str | None
    receipt: dict[str, Any] | None = None


def _backoff(attempts: int, policy: RetryPolicy, u: float) -> int:
    return exponential_delay_ms(max(1, attempts), policy.base_ms, policy.cap_ms, policy.jitter, u)


def settle(outcome: AttemptOutcome, runs: int, now_ms: int, policy: RetryPolicy,
           u: float) -> Settlement:
    """The job's next state after its run number ``runs`` (1-based) came to ``outcome``; the
    receiver's receipt rides a terminal settlement either way (PO-12)."""
    if isinstance(outcome, Delivered):
        return Settlement(JobState.DELIVERED, None, None, outcome.receipt)
    if isinstance(outcome, Refused):
        return Settlement(JobState.DEAD, None, outcome.reason, outcome.receipt)
    if runs >= policy.max_attempts:
        return Settlement(JobState.DEAD, None, f"retry_budget_spent:{outcome.reason}",
                          outcome.receipt)
    return Settlement(JobState.FAILED, now_ms + _backoff(runs, policy, u), outcome.reason,
                      outcome.receipt)


def settle_expired(runs: int, now_ms: int, policy: RetryPolicy, u: float) -> Settlement:
    """A running job whose lease passed (a crash, a lost answer): a failed run."""
    return settle(Failed("attempt_expired"), runs, now_ms, policy, u)


class RetryAction(enum.StrEnum):
    EXPEDITE = "expedite"          # a settled failed attempt: try again now
    REQUEUE_BEHIND = "requeue"     # a dead letter: back in line after the work queued now
    UNCHANGED = "unchanged"        # queued or running: Post's own lifecycle has it
    DELIVERED = "delivered"        # a delivered receipt is never reopened


def retry_action(state: JobState) -> RetryAction:
    """What ``retry(key)`` does to a job in ``state`` (PO-6)."""
    if state is JobState.FAILED:
        return RetryAction.EXPEDITE
    if state is JobState.DEAD:
        return RetryAction.REQUEUE_BEHIND
    if state is JobState.DELIVERED:
        return RetryAction.DELIVERED
    return RetryAction.UNCHANGED


# ---- addresses -----------------------------------------------------------------------------


def canonical_json(value: Any) -> bytes:
    """JSON with sorted keys: the same address or event always gives the same bytes."""
    return msgspec.json.encode(value, order="sorted")


def address_key(kind: str, address: Any) -> str:
    """The ordering key of one recipient: its kind label and its canonical address, hashed so
    that stored keys and cursors never show an address."""
    return hashlib.sha256(kind.encode() + b"\0" + canonical_json(address)).hexdigest()[:32]
