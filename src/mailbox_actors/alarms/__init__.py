"""The node's alarm scheduler and its durable index; import from the modules (scheduler, index)."""

__all__: list[str] = []
