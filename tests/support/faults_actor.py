"""The fault test's actor (CL-16): one list per key, appended to with unique values.

Each element carries the epoch of the slot lease its writer held (0 outside machine mode), read
from the slot's fence the node hands its actors; an append emits an event in the same transaction,
so every acknowledged append has exactly one event for the webhook receiver. Served on machines
with ``--objects faults_actor:FaultList`` (``tests/support`` on PYTHONPATH).
"""

from __future__ import annotations

from typing import Any

import msgspec

from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.wire.errors import InvalidRequest

__all__ = ["APPENDED", "NAMESPACE", "Append", "FaultList", "Init", "Read"]

NAMESPACE = "fault_list"
APPENDED = "fault_list.appended"


class Init(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    pass


class Append(msgspec.Struct, tag="append", tag_field="op", forbid_unknown_fields=True):
    key: str
    value: str


class Read(msgspec.Struct, tag="read", tag_field="op", forbid_unknown_fields=True):
    pass


FaultListRequest = Init | Append | Read


def _slot_fence() -> Any:
    """The key of the slot's fence among the node's services, once machine mode has one."""
    try:
        from mailbox_actors.platform.storage.fence import SLOT_FENCE
    except ImportError:  # before machine mode: every element is written at epoch 0
        return None
    return SLOT_FENCE


_FENCE = _slot_fence()


class FaultList(Actor):
    namespace = NAMESPACE
    requests = FaultListRequest
    init_request = Init
    owner_kind = "tenant"
    migrations = (Migration(1, (
        "CREATE TABLE elements (n INTEGER PRIMARY KEY AUTOINCREMENT, value TEXT NOT NULL, "
        "epoch INTEGER NOT NULL)",)),)

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case Init():
                return self.sql.transaction_sync(lambda _tx: self.ctx.claim_owner(call))
            case Append():
                return self.sql.transaction_sync(lambda tx: self._append(tx, req))
            case Read():
                return [[v, e] for v, e in self.sql.exec(
                    "SELECT value, epoch FROM elements ORDER BY n")]
        raise InvalidRequest("unknown op")

    def _epoch(self) -> int:
        fence = None if _FENCE is None else self.ctx.service(_FENCE)
        return 0 if fence is None else int(fence.lease.epoch)

    def _append(self, tx: SqlStorage, req: Append) -> dict[str, int]:
        epoch = self._epoch()
        tx.exec("INSERT INTO elements (value, epoch) VALUES (?, ?)", req.value, epoch)
        self.ctx.emit(tx, APPENDED, {"key": req.key, "value": req.value, "epoch": epoch})
        return {"epoch": epoch}
