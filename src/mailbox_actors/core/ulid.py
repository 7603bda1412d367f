"""Monotonic ULIDs (seed section 3): same millisecond, increment the 80-bit random part.

Pure: the caller passes the time and the random bytes.
"""

from __future__ import annotations

__all__ = ["MAX_RANDOM", "next_ulid_parts"]

MAX_RANDOM = (1 << 80) - 1
MAX_TIME = (1 << 48) - 1


def next_ulid_parts(
    last: tuple[int, int] | None, now_ms: int, random80: bytes
) -> tuple[int, int]:
    """Return (time_ms, random) for the next id after ``last``, never going backwards.

    If the clock has not passed the last id's millisecond, reuse that millisecond and add one to the
    random part; on overflow move to the next millisecond with fresh randomness.
    """
    if not 0 <= now_ms <= MAX_TIME:
        raise ValueError("now_ms out of ULID range")
    if len(random80) != 10:
        raise ValueError("random80 must be 10 bytes")
    fresh = int.from_bytes(random80, "big")
    if last is None or now_ms > last[0]:
        return now_ms, fresh
    last_ms, last_rand = last
    if last_rand < MAX_RANDOM:
        return last_ms, last_rand + 1
    return last_ms + 1, fresh
