"""Post (PO-1..PO-12): ordered, typed delivery between actors, with receipts and dead letters.

A layer between the runtime and the objects. ``routes`` (Route, Routes), ``actor_post`` (Post on
an actor's own SQLite file, run from its alarm purpose), ``outbox`` (the string-backed outbox:
string payloads to named receiver callables, PO-10), ``receiver`` (``admit_post``,
``receive``), ``executor`` (the attempt loop all adapters share), ``control`` (statements for the
control database's batch), ``postgres`` and ``pg_schema`` (the ``postgres`` extra), ``loop`` (a
host's wake for those two), ``ops`` (a producer's RPC ops), ``inspection`` (the operator scan's
rows), ``sql`` (the SQLite tables, prefixed ``post_``). Pure rules live in ``core.post``. Import
from the modules.
"""

__all__: list[str] = []
