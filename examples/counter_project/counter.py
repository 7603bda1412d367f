"""A counter actor: ``add`` n, ``get``, and an alarm that empties the counter at midnight.

It uses only the public API: ``mailbox_actors.Actor``, ``Migration``, ``AlarmInfo``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec

from mailbox_actors import Actor, AlarmInfo, ErrorCode, MailboxActorsError, Migration

DAY_MS = 86_400_000


class Start(msgspec.Struct, tag="start", tag_field="op", forbid_unknown_fields=True):
    pass


class Add(msgspec.Struct, tag="add", tag_field="op", forbid_unknown_fields=True):
    n: int


class Get(msgspec.Struct, tag="get", tag_field="op", forbid_unknown_fields=True):
    pass


class Total(msgspec.Struct):
    total: int


class Counter(Actor):
    namespace = "counter"
    requests = Start | Add | Get
    replies: ClassVar[Mapping[str, Any]] = {"get": Total}
    init_request = Start
    migrations = (Migration(1, (
        "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL)",
        "INSERT INTO meta (k, v) VALUES ('total', 0)",
    )),)

    async def handle(self, call: Any, req: Any) -> Any:
        match req:
            case Start():
                return self.sql.transaction_sync(lambda _tx: self._start(call))
            case Add(n=n) if n > 0:
                self.sql.exec("UPDATE meta SET v = v + ? WHERE k = 'total'", n)
                return self._total()
            case Add():
                raise MailboxActorsError(ErrorCode.INVALID_REQUEST, "add takes n > 0")
            case Get():
                return self._total()
        raise MailboxActorsError(ErrorCode.INVALID_REQUEST, "unknown op")

    def _start(self, call: Any) -> dict[str, bool]:
        created = self.ctx.claim_owner(call)
        if created:
            now = self.sql.now_ms()
            self.sql.set_alarm(now - now % DAY_MS + DAY_MS)
        return {"created": created}

    def _total(self) -> dict[str, int]:
        return {"total": self.sql.exec("SELECT v FROM meta WHERE k = 'total'").one()[0]}

    async def alarm(self, info: AlarmInfo) -> None:
        def reset(tx: Any) -> None:
            tx.exec("UPDATE meta SET v = 0 WHERE k = 'total'")
            tx.set_alarm(info.scheduled_ms + DAY_MS)
        self.sql.transaction_sync(reset)
