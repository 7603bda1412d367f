"""One alarm, many purposes (AL-2): pure decisions over the ``alarm:{purpose}`` entries in meta."""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["PURPOSE_RE", "alarm_after_schedule", "due_purposes", "earliest", "meta_key"]

PURPOSE_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def meta_key(purpose: str) -> str:
    if not PURPOSE_RE.match(purpose):
        raise ValueError(f"alarm purpose must match {PURPOSE_RE.pattern!r}, got {purpose!r}")
    return f"alarm:{purpose}"


def alarm_after_schedule(current_alarm: int | None, at_ms: int) -> int:
    """Scheduling a purpose lowers the actor's alarm to it when earlier, never raises it."""
    return at_ms if current_alarm is None or at_ms < current_alarm else current_alarm


def due_purposes(pending: Mapping[str, int], now_ms: int) -> list[str]:
    """Purposes whose time has come, earliest first (ties by name, so runs are deterministic)."""
    return [p for p, at in sorted(pending.items(), key=lambda kv: (kv[1], kv[0])) if at <= now_ms]


def earliest(pending: Mapping[str, int]) -> int | None:
    """The time to re-arm the alarm to after a run: the earliest purpose still pending."""
    return min(pending.values(), default=None)
