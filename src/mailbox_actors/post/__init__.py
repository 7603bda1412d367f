"""Post (PO-1..PO-9): ordered, typed delivery between actors, with receipts and dead letters.

A layer between the runtime and the objects; adapters for actor SQLite, the control database and
PostgreSQL. Import from the modules.
"""

__all__: list[str] = []
