"""The cluster's control database (Q-3, the seed's D1): schema, checks and the async client.

Import from the modules (``database``, ``schema``, ``checks``).
"""

__all__: list[str] = []
