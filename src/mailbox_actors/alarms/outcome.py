"""What became of one alarm wake (AL-3, AL-4): the host's answer to the scheduler, typed."""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["AlarmOutcome", "AlarmResult"]


class AlarmOutcome(enum.Enum):
    DONE = "done"                # the handler ran and succeeded
    FAILED = "failed"            # the handler raised, or its writes were rolled back: retry
    REPLACED = "replaced"        # the handler raised after setting a new alarm: that one stands,
    #                              as a fresh alarm, instead of a retry (AL-7)
    LATER = "later"              # the stored alarm is not due yet (an early wake)
    GONE = "gone"                # no alarm stored, or no such actor: nothing to fire
    BUSY = "busy"                # a run of this actor's alarm is under way, or the node stops
    UNAVAILABLE = "unavailable"  # the actor's file cannot be opened now: look again later
    UNKNOWN = "unknown"          # this node does not serve the namespace
    MALFORMED = "malformed"      # the key is no id (a damaged index row): it never will be one


class AlarmResult(NamedTuple):
    outcome: AlarmOutcome
    stored: int | None  # the alarm stored after the wake (None: none)
