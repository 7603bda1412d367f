"""What an actor file's schema decides, learnt once per process for the files whose schema is
exactly what their class's migrations made (RT-6, RT-13, RT-14; ADR 0016's addendum).

SQLite asks the authorizer about every statement each new connection prepares, and the row
counter asks the schema (``PRAGMA index_list``) which indexes a write reaches: an evicted actor
opened again pays both for every statement, though the answers depend on the statement's text and
the schema alone. A file whose schema came from its class's migrations and nothing else carries
``SOURCE_KEY`` in ``_ma_meta``: the fingerprint of those migrations (``schema_source``). Every
file with the same fingerprint has the same schema, so what one connection learnt of it holds for
all (``SchemaFacts``): which texts prepared without a denial (prepared again with the authorizer
off: the same text on the same schema asks the same questions and gets the same answers), what
each writes and how many index rows a changed row costs, and each table's indexes.

The key is written in the migrations' own transaction, by a run that started from a file made by
this open (nothing else in it) or from a file that still carried the previous version's
fingerprint; a schema change made any other way (actor SQL's CREATE, DROP or ALTER, ``delete_all``)
deletes it in the change's own transaction, so a file rolled back keeps both as they were. A file
without the key (made before it existed, or changed) is screened statement by statement as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["SOURCE_KEY", "KnownSchema", "SchemaFacts", "facts_for", "schema_source"]

# In _ma_meta, among the runtime keys an activation reads first ('erased' and on),
# so the file's first read brings it at no cost.
SOURCE_KEY = "schema_source"
_MAX_SCHEMAS = 256
MAX_TEXTS = 4096  # per schema; longer lists are screened again (the caches stay bounded)
MAX_TEXT_LEN = 2048


class SchemaFacts:
    """What one schema decides (``known``'s docstring), shared by its files' connections."""

    __slots__ = ("indexes", "runtime_texts", "statements")

    def __init__(self) -> None:
        # actor SQL text -> (its write shape, index rows per changed row), for texts that
        # prepared without a denial on this schema
        self.statements: dict[str, tuple[tuple[tuple[str, str | None], ...], int]] = {}
        # runtime texts that prepared without a denial (a trigger they fire is screened)
        self.runtime_texts: set[str] = set()
        # table -> its indexes' columns (None: an expression index), as the row counter reads them
        self.indexes: dict[str, list[frozenset[str] | None]] = {}


_FACTS: dict[str, SchemaFacts] = {}


def facts_for(source: str) -> SchemaFacts | None:
    """The process's facts about the schema ``source`` names (None past the bound)."""
    facts = _FACTS.get(source)
    if facts is None and len(_FACTS) < _MAX_SCHEMAS:
        facts = _FACTS[source] = SchemaFacts()
    return facts


def schema_source(namespace: str, runtime_version: int,
                  migrations: Sequence[Sequence[str]]) -> str:
    """The fingerprint of the schema the runtime layout ``runtime_version`` and ``migrations``
    (each version's statements, in order) make: equal fingerprints, equal schemas."""
    h = hashlib.sha256(f"{namespace}\0{runtime_version}".encode())
    for version, statements in enumerate(migrations, start=1):
        h.update(f"\0\0{version}".encode())
        for stmt in statements:
            h.update(b"\0" + stmt.encode())
    return h.hexdigest()[:32]


class KnownSchema(NamedTuple):
    """A class's newest schema as its files carry it: a file whose runtime meta holds
    ``version`` at ``version_key`` and ``source`` at ``SOURCE_KEY`` has exactly that schema and
    no migration pending, so its storage is made knowing it (no authorizer set, ``_know``)."""

    version_key: str
    version: str
    source: str

    def facts(self, meta: dict[str, str]) -> SchemaFacts | None:
        if meta.get(SOURCE_KEY) == self.source and meta.get(self.version_key) == self.version:
            return facts_for(self.source)
        return None
