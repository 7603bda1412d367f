"""Monotonic ULIDs (seed section 3): same millisecond, increment the 80-bit random part.

Pure: the caller passes the time and the random bytes.
"""

from __future__ import annotations

__all__ = ["MAX_RANDOM", "encode_ulid", "next_in_millisecond", "next_ulid_parts"]

MAX_RANDOM = (1 << 80) - 1
MAX_TIME = (1 << 48) - 1
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two base-32 digits per lookup: 13 lookups make the 26 characters of a ULID.
_PAIRS = tuple(a + b for a in _CROCKFORD for b in _CROCKFORD)
_time_text: tuple[int, str] = (-1, "")  # the last millisecond encoded, and its ten characters


def encode_ulid(time_ms: int, random: int) -> str:
    """The 26-character Crockford base-32 text of a ULID (the canonical form, as the ``ulid``
    package prints it): big-endian, ten bits at a time. Ids are minted on every write (several a
    message at the SMTP door), so this is written for speed: the time's ten characters are kept
    for the millisecond that asks again, and the random part's 80 bits are read as two 40-bit
    halves (small integers) rather than as shifts of one 128-bit value."""
    global _time_text
    pairs = _PAIRS
    known_ms, text = _time_text
    if known_ms != time_ms:
        text = (pairs[time_ms >> 40] + pairs[(time_ms >> 30) & 1023]
                + pairs[(time_ms >> 20) & 1023] + pairs[(time_ms >> 10) & 1023]
                + pairs[time_ms & 1023])
        _time_text = (time_ms, text)  # one tuple: a reader sees the old pair or the new
    a = random >> 40
    b = random & 0xFFFFFFFFFF
    return "".join((text, pairs[a >> 30], pairs[(a >> 20) & 1023], pairs[(a >> 10) & 1023],
                    pairs[a & 1023], pairs[b >> 30], pairs[(b >> 20) & 1023],
                    pairs[(b >> 10) & 1023], pairs[b & 1023]))


def next_in_millisecond(last: tuple[int, int] | None, now_ms: int) -> tuple[int, int] | None:
    """The next id's (time_ms, random) when it needs no randomness (the clock has not passed the
    last id's millisecond and its random part can still grow by one), else None: then
    ``next_ulid_parts`` with fresh random bytes."""
    if last is not None and 0 <= now_ms <= last[0] and last[1] < MAX_RANDOM:
        return last[0], last[1] + 1
    return None


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
