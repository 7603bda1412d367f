"""Lengths of time every part of the platform counts in, in milliseconds (one definition each)."""

from __future__ import annotations

__all__ = ["DAY_MS", "HOUR_MS", "MINUTE_MS", "SECOND_MS"]

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
