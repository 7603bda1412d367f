"""Provider rejections (CA-5): the temporary/permanent table, and the retry schedule and budget.

A temporary rejection puts the Email back to ``queued`` and dispatches it again after an
exponential backoff, until the budget of definite rejections is spent (then ``rejected``). A
permanent one ends it ``rejected``. A code outside the table is not a documented refusal: the
transport answers ``outcome_unknown`` for it (some recipients may already have been accepted).
"""

from __future__ import annotations

from typing import Literal

from mailbox_actors.core.backoff import exponential_delay_ms

__all__ = ["CLOUDFLARE_CODES", "UNREACHABLE_CAP_MS", "unreachable_next",
           "RETRY_BASE_MS", "RETRY_BUDGET", "RETRY_CAP_MS", "cloudflare_class",
           "smtp_class", "temporary_retry_at"]

RejectionClass = Literal["temporary", "permanent"]

CLOUDFLARE_CODES: dict[str, RejectionClass] = {
    "E_RATE_LIMIT_EXCEEDED": "temporary",
    "E_DAILY_LIMIT_EXCEEDED": "temporary",
    "E_INTERNAL_SERVER_ERROR": "temporary",
    **{code: "permanent" for code in (
        "E_VALIDATION_ERROR", "E_FIELD_MISSING", "E_TOO_MANY_RECIPIENTS",
        "E_TOO_MANY_ATTACHMENTS", "E_SENDER_NOT_VERIFIED", "E_RECIPIENT_NOT_ALLOWED",
        "E_RECIPIENT_SUPPRESSED", "E_SENDER_DOMAIN_NOT_AVAILABLE", "E_CONTENT_TOO_LARGE",
        "E_HEADER_NOT_ALLOWED", "E_HEADER_USE_API_FIELD", "E_HEADER_VALUE_INVALID",
        "E_HEADER_VALUE_TOO_LONG", "E_HEADER_NAME_INVALID", "E_HEADERS_TOO_LARGE",
        "E_HEADERS_TOO_MANY")},
}
# E_DELIVERY_FAILED is deliberately absent: it is outcome_unknown, like any code not listed.

RETRY_BUDGET = 8  # definite rejections before a temporary class ends the Email rejected
RETRY_BASE_MS = 30_000
RETRY_CAP_MS = 3_600_000
_JITTER = 0.25


def cloudflare_class(code: str | None) -> RejectionClass | None:
    """The class of a Cloudflare-style error code; None: not documented, so outcome_unknown."""
    return None if code is None else CLOUDFLARE_CODES.get(code)


def smtp_class(reply_code: int) -> RejectionClass | None:
    """An SMTP refusal's class (CA-11): 4yz temporary, 5yz permanent, anything else None."""
    if 400 <= reply_code <= 499:
        return "temporary"
    if 500 <= reply_code <= 599:
        return "permanent"
    return None


def temporary_retry_at(attempts: int, now_ms: int, u: float) -> int | None:
    """After the ``attempts``-th definite rejection (1-based) of a temporary class: when to try
    again, or None once the budget is spent. ``u`` in [0, 1) is the caller's jitter draw."""
    if attempts >= RETRY_BUDGET:
        return None
    return now_ms + exponential_delay_ms(attempts, RETRY_BASE_MS, RETRY_CAP_MS, _JITTER, u)


UNREACHABLE_CAP_MS = 1_800_000  # an unreachable provider is tried again at least every 30 minutes


def unreachable_next(failures: int, since_ms: int, now_ms: int, window_ms: int,
                     u: float) -> int | None:
    """After the ``failures``-th transport failure in a row that the provider could not have
    seen (CA-16), the first of them at ``since_ms``: when to try again, or None once
    ``window_ms`` has passed without a dispatch (the Email then expires)."""
    if now_ms - since_ms >= window_ms:
        return None
    retry = now_ms + exponential_delay_ms(failures, RETRY_BASE_MS, UNREACHABLE_CAP_MS, _JITTER, u)
    return min(retry, since_ms + window_ms)  # the last try falls at the window's end
