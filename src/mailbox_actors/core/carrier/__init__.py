"""Carrier's pure rules (CA-1..CA-7, CA-13): statuses and their transitions, the replay digest,
addresses and headers, the per-recipient cap, rejection classes and the retry schedule.

No I/O, no clock, no randomness: callers pass ``now_ms`` and random fractions. Import from the
modules.
"""

__all__: list[str] = []
