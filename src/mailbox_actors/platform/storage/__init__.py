"""One actor's own SQLite file: SQL, transactions, KV, the alarm, and how the file is opened.

Import from the modules (``sql``, ``opening``, ``screen``, ``types``, ``kv``).
"""

__all__: list[str] = []
