"""One actor's own SQLite file: SQL, transactions, KV, the alarm, and how the file is opened.

Import from the modules: ``sql`` (what actor code gets), ``runtime_access`` (the runtime's side),
``opening``, ``screen`` (what user SQL may do), ``kv``, ``cursor``, ``limits``, ``errors``, ``hooks``.
"""

__all__: list[str] = []
