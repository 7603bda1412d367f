"""Pure decisions (no I/O, no clock, no randomness); import from the modules."""

__all__: list[str] = []
