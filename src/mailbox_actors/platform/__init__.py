"""Clocks, randomness, ids, actor storage, locks, logging, metrics, the control database and
the queues; import from the modules."""

__all__: list[str] = []
