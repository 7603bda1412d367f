"""``FakeResolver``: a resolver answering from a table a test writes, scriptable per call (DM-1).

A name the table does not hold is NXDOMAIN; ``set`` stores records (or an outcome) for a name and
type; ``script`` queues answers used once each, in order, before the standing one (a timeout now, the
records next time). Every question asked is recorded in ``queries``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from mailbox_actors.core.dns.answers import Answer, Outcome, Query, Rtype

__all__ = ["FakeResolver"]

Value = Sequence[str] | Outcome | Answer


class FakeResolver:
    def __init__(self) -> None:
        self._table: dict[Query, Value] = {}
        self._scripted: dict[Query, deque[Value]] = {}
        self.queries: list[Query] = []
        self.closed = False

    def set(self, name: str, rtype: Rtype, value: Value) -> None:
        """Records (presentation form), an outcome (TIMEOUT, NXDOMAIN...) or a whole Answer."""
        self._table[(name.lower(), rtype)] = value

    def remove(self, name: str, rtype: Rtype) -> None:
        self._table.pop((name.lower(), rtype), None)

    def script(self, name: str, rtype: Rtype, *values: Value) -> None:
        self._scripted.setdefault((name.lower(), rtype), deque()).extend(values)

    async def resolve(self, name: str, rtype: Rtype) -> Answer:
        if self.closed:
            raise RuntimeError("the resolver was closed")
        q = (name.lower(), rtype)
        self.queries.append(q)
        queued = self._scripted.get(q)
        value: Value = queued.popleft() if queued else self._table.get(q, Outcome.NXDOMAIN)
        if isinstance(value, Answer):
            return value
        if isinstance(value, Outcome):
            return Answer(name, rtype, value, detail="fake" if value in (
                Outcome.TIMEOUT, Outcome.SERVFAIL, Outcome.ERROR) else "")
        records = tuple(value)
        return Answer(name, rtype, Outcome.RECORDS if records else Outcome.NODATA, records)

    async def aclose(self) -> None:
        self.closed = True
