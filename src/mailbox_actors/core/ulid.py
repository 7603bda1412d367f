"""Monotonic ULIDs (seed section 3): same millisecond, increment the 80-bit random part.

Pure: the caller passes the time and the random bytes.
"""

from __future__ import annotations

__all__ = ["MAX_RANDOM", "encode_ulid", "next_in_millisecond", "next_ulid_parts", "ulid_int"]

MAX_RANDOM = (1 << 80) - 1
MAX_TIME = (1 << 48) - 1
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two base-32 digits per lookup: 13 lookups make the 26 characters of a ULID.
_PAIRS = tuple(a + b for a in _CROCKFORD for b in _CROCKFORD)
# The last id's millisecond and the top 60 bits of its random part, with the 22 characters they
# make: ids minted within one millisecond add one to the random part, so the next id usually
# shares them and only its last four characters (the low 20 bits) are new.
_head: tuple[int, int, str] = (-1, -1, "")
# Crockford's digits as Python's base-32 digits, so int(text, 32) reads a canonical ULID.
_TO_BASE32 = str.maketrans(_CROCKFORD, "0123456789abcdefghijklmnopqrstuv")


def encode_ulid(time_ms: int, random: int) -> str:
    """The 26-character Crockford base-32 text of a ULID (the canonical form, as the ``ulid``
    package prints it): big-endian, ten bits at a time. Ids are minted on every write (several a
    message at the SMTP door, three a submit), so this is written for speed: the first 22
    characters are kept for the next id of the same millisecond and random top (the time's ten
    and the random part's top 60 bits), and the rest is two lookups in a table of 10-bit pairs."""
    global _head
    pairs = _PAIRS
    high = random >> 20
    known_ms, known_high, text = _head
    if known_ms != time_ms or known_high != high:
        text = "".join((pairs[time_ms >> 40], pairs[(time_ms >> 30) & 1023],
                        pairs[(time_ms >> 20) & 1023], pairs[(time_ms >> 10) & 1023],
                        pairs[time_ms & 1023], pairs[high >> 50], pairs[(high >> 40) & 1023],
                        pairs[(high >> 30) & 1023], pairs[(high >> 20) & 1023],
                        pairs[(high >> 10) & 1023], pairs[high & 1023]))
        _head = (time_ms, high, text)  # one tuple: a reader sees the old triple or the new
    low = random & 0xFFFFF
    return text + pairs[low >> 10] + pairs[low & 1023]


def ulid_int(text: str) -> int:
    """The 128-bit value (time << 80 | random) of a canonical ULID text, as ``encode_ulid``
    writes it (the caller checks the text is one)."""
    return int(text.translate(_TO_BASE32), 32)


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
