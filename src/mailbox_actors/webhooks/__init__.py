"""Events leaving the cluster (EV-2, Q-4): publishing outbox events, signing and delivering webhooks.

Import from the modules (``publish``, ``delivery``, ``signature``).
"""

__all__: list[str] = []
