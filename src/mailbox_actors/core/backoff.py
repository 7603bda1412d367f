"""Retry schedules (AL-3): alarm handlers retry at 2, 4, 8, 16, 32, 64 s, plus up to 25% jitter."""

from __future__ import annotations

__all__ = ["ALARM_MAX_RETRIES", "alarm_retry_delay_ms", "exponential_delay_ms"]

ALARM_MAX_RETRIES = 6
_ALARM_BASE_MS = 2_000


def exponential_delay_ms(
    attempt: int, base_ms: int, cap_ms: int, jitter_fraction: float, u: float
) -> int:
    """Delay before retry number ``attempt`` (1-based): base * 2^(attempt-1), capped, plus jitter.

    ``u`` is a random float in [0, 1) supplied by the caller; the jitter adds up to
    ``jitter_fraction`` of the delay.
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    if not 0.0 <= u < 1.0:
        raise ValueError("u must be in [0, 1)")
    delay = min(cap_ms, base_ms * (1 << min(attempt - 1, 40)))
    return delay + int(delay * jitter_fraction * u)


def alarm_retry_delay_ms(retry_count: int, u: float) -> int | None:
    """Delay before alarm retry ``retry_count`` (1..6), or None once the retries are spent."""
    if retry_count > ALARM_MAX_RETRIES:
        return None
    return exponential_delay_ms(retry_count, _ALARM_BASE_MS, 64_000, 0.25, u)
