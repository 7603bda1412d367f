"""Rolling rate windows (OBJ-2): pure decisions over bucketed counts.

A window of ``window_ms`` is counted in buckets of ``bucket_ms``; a bucket counts while any part of it
lies inside the window, so the limit is never exceeded and a refusal names exactly how long until
enough of the oldest buckets have left the window.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from mailbox_actors.core.durations import DAY_MS, HOUR_MS, MINUTE_MS, SECOND_MS

__all__ = [
    "DAY", "MINUTE", "RETENTION_MS", "Window", "bucket_start", "oldest_counted", "retry_after_ms",
    "used",
]


class Window(msgspec.Struct, frozen=True):
    scope: str
    window_ms: int
    bucket_ms: int


MINUTE = Window("m", MINUTE_MS, SECOND_MS)
DAY = Window("d", DAY_MS, HOUR_MS)
RETENTION_MS = 48 * HOUR_MS  # maintenance deletes windows older than this


def bucket_start(w: Window, now_ms: int) -> int:
    return now_ms - now_ms % w.bucket_ms


def oldest_counted(w: Window, now_ms: int) -> int:
    """Buckets starting after this are inside the window."""
    return now_ms - w.window_ms - w.bucket_ms


def used(w: Window, buckets: Iterable[tuple[int, int]], now_ms: int) -> int:
    low = oldest_counted(w, now_ms)
    return sum(c for s, c in buckets if s > low)


def retry_after_ms(w: Window, buckets: Iterable[tuple[int, int]], limit: int, count: int,
                   now_ms: int) -> int | None:
    """None when ``count`` more fit in the window; else ms until they would (>= 1).

    A ``count`` larger than ``limit`` can never fit; the caller refuses it before asking.
    """
    low = oldest_counted(w, now_ms)
    live = sorted((s, c) for s, c in buckets if s > low and c > 0)
    total = sum(c for _, c in live)
    need = total + count - limit
    if need <= 0:
        return None
    freed = 0
    for s, c in live:
        freed += c
        if freed >= need:
            return max(1, s + w.bucket_ms + w.window_ms - now_ms)
    return w.window_ms
