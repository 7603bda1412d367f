"""Clocks, randomness, ids, locks, logging, metrics; actor storage, the control database, the queues,
mail transports and DNS as subpackages; import from the modules."""

__all__: list[str] = []
