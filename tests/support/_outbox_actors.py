"""An actor with a string-backed outbox (PO-10) for the outbox tests, and its crash child.

``SCRIPT[key]`` lists what the receiver callables do at each invocation of that key, in turn:
``"ok"`` (delivered with a receipt), ``"none"`` (answer None: delivered), ``"fail"`` (raise
``unavailable``), ``"boom"`` (raise a plain exception), ``"deny"`` (raise ``permission_denied``,
a permanent code), ``"refuse_receipt"`` (refused with a receipt), ``"hang"`` (note the call in
``HANG_FILE``, print ``invoked``, never answer: the crash test kills the process then). Past the
list's end it is ``"ok"``. ``CALLS`` records every invocation: (receiver, key, attempt, address,
payload).

    python tests/support/_outbox_actors.py DATA_DIR HANG_FILE   # the crash child
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio
import msgspec

from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.outbox import OutboxLetter, PostOutbox
from mailbox_actors.post.sql import POST_RUNS, POST_SCHEMA
from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

TENANT = "t_outbox"
SCRIPT: dict[str, list[str]] = {}
CALLS: list[tuple[str, str, int, str, str]] = []
HANG_FILE: list[Path] = []


def reset() -> None:
    SCRIPT.clear()
    CALLS.clear()
    HANG_FILE.clear()


async def _receive(letter: OutboxLetter) -> Mapping[str, Any] | None:
    CALLS.append((letter.receiver, letter.key, letter.attempt, letter.address, letter.payload))
    steps = SCRIPT.get(letter.key, [])
    step = steps[letter.attempt - 1] if letter.attempt <= len(steps) else "ok"
    if step == "none":
        return None
    if step == "fail":
        raise MailboxActorsError(ErrorCode.UNAVAILABLE, "the endpoint is down")
    if step == "boom":
        raise RuntimeError("the agent crashed")
    if step == "deny":
        raise MailboxActorsError(ErrorCode.PERMISSION_DENIED, "the endpoint refuses this key")
    if step == "refuse_receipt":
        return {"status": "refused", "reason": "unknown_conversation",
                "receipt": {"looked_up": letter.address}}
    if step == "hang":
        with HANG_FILE[0].open("a") as f:
            f.write(f"{letter.key} {letter.attempt}\n")
        print("invoked", letter.key, letter.attempt, flush=True)
        await anyio.Event().wait()
    return {"status": "delivered", "receipt": {"seen": f"{letter.address}/{letter.seq}"}}


class OInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    pass


class OSend(msgspec.Struct, tag="send", tag_field="op", forbid_unknown_fields=True):
    receiver: str
    address: str
    payload: str
    key: str
    also_fail: bool = False  # the producer's own change fails after the send


class ORetry(msgspec.Struct, tag="retry", tag_field="op", forbid_unknown_fields=True):
    key: str


class OGet(msgspec.Struct, tag="get", tag_field="op", forbid_unknown_fields=True):
    key: str


class OLatest(msgspec.Struct, tag="latest", tag_field="op", forbid_unknown_fields=True):
    receiver: str
    address: str


class ODead(msgspec.Struct, tag="dead", tag_field="op", forbid_unknown_fields=True):
    after: str | None = None


OutboxRequest = OInit | OSend | ORetry | OGet | OLatest | ODead


class OutboxProducer(Actor):
    namespace = "outbox_producer"
    requests = OutboxRequest
    init_request = OInit
    migrations = (Migration(1, POST_SCHEMA), Migration(2, POST_RUNS))
    alarm_purposes: ClassVar[Mapping[str, str]] = {"outbox": "outbox_tick"}

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.outbox = PostOutbox(self, {"hook": _receive, "agent": _receive})

    async def outbox_tick(self) -> None:
        await self.outbox.run()

    async def handle(self, call: Call, req: Any) -> Any:
        match req:
            case OInit():
                return self.sql.transaction_sync(lambda tx: self.ctx.claim_owner(call))
            case OSend():
                return self.sql.transaction_sync(lambda tx: self._send(tx, req))
            case ORetry():
                return self.sql.transaction_sync(lambda tx: self.outbox.retry(tx, req.key).value)
            case OGet():
                return self.outbox.get(req.key)
            case OLatest():
                return self.outbox.latest(req.receiver, req.address)
            case ODead():
                return self.outbox.dead_letters(req.after)
        raise InvalidRequest("unknown op")

    def _send(self, tx: SqlStorage, req: OSend) -> Any:
        record = self.outbox.send(tx, req.receiver, req.address, req.payload, req.key)
        if req.also_fail:
            raise MailboxActorsError(ErrorCode.CONFLICT, "the producer's own change failed")
        return record


async def _child(data: Path, hang_file: Path) -> None:
    from mailbox_actors.testing import TestRuntime

    HANG_FILE.append(hang_file)
    SCRIPT["k1"] = ["hang"]
    async with TestRuntime(data, objects=(OutboxProducer,)) as rt:
        oid = rt.id_from_name("outbox_producer", "p")
        await rt.call("outbox_producer", oid, OInit(), tenant_id=TENANT)
        await rt.call("outbox_producer", oid, OSend(receiver="hook", address="conv-1",
                                                    payload="reply one", key="k1"),
                      tenant_id=TENANT)
        await rt.call("outbox_producer", oid, OSend(receiver="hook", address="conv-1",
                                                    payload="reply two", key="k2"),
                      tenant_id=TENANT)
        print("sent", oid, flush=True)
        await rt.run_until_idle()  # the first letter's receiver never answers: killed there


if __name__ == "__main__":
    anyio.run(_child, Path(sys.argv[1]), Path(sys.argv[2]))
