"""``{prefix}_{ULID}`` ids (RT-12), monotonic within the process."""

from __future__ import annotations

import re
import threading

from mailbox_actors.core.ulid import MAX_RANDOM, encode_ulid, next_ulid_parts
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.rng import Rng

__all__ = ["Ids", "PREFIX_RE"]

PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")


class Ids:
    """Mints ``req_01J...``-style ids from a Clock and an Rng; strictly increasing per generator."""

    def __init__(self, clock: Clock, rng: Rng) -> None:
        self._clock = clock
        self._rng = rng
        self._last: tuple[int, int] | None = None
        self._prefixes: set[str] = set()  # checked once: the same few prefixes recur
        # An id may be minted off the loop (an alarm run's req_ id is minted where it is first
        # read, a worker thread's log line included): the step from the last id is one at a time.
        self._lock = threading.Lock()

    def new_id(self, prefix: str) -> str:
        if prefix not in self._prefixes:
            if not isinstance(prefix, str) or not PREFIX_RE.match(prefix):
                raise ValueError(f"id prefix must match {PREFIX_RE.pattern!r}, got {prefix!r}")
            if len(self._prefixes) < 64:
                self._prefixes.add(prefix)
        # Within one millisecond the random part grows by one (the seed's rule): randomness is
        # drawn only for an id that starts a new millisecond.
        # (``core.ulid.next_in_millisecond``, inlined: this runs for every id.)
        now = self._clock.now_ms()
        with self._lock:
            last = self._last
            if last is not None and 0 <= now <= last[0] and last[1] < MAX_RANDOM:
                parts = (last[0], last[1] + 1)
            else:
                parts = next_ulid_parts(last, now, self._rng.random_bytes(10))
            self._last = parts
        return f"{prefix}_{encode_ulid(parts[0], parts[1])}"
