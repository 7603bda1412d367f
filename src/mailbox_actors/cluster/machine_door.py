"""The SMTP door of a machine (CL-15): every machine may run one.

RCPT resolves in the cluster's control database (PostgreSQL, through the machine's front node,
as on one machine); DATA goes to the holder of the recipient mailbox's slot through the machine's
HTTP application: in process when this machine serves the slot, one hop when another does, and
``451`` while the slot has no holder (the app's ``unavailable``, a retryable refusal).
"""

from __future__ import annotations

import hashlib
from typing import Any, cast

from mailbox_actors.cluster.machine_app import MachineApp
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.smtp_door import SmtpDoor
from mailbox_actors.platform.control.addresses import Recipient
from mailbox_actors.wire.inbound import Ingest

__all__ = ["MachineDoor"]


class _DoorApp:
    """The door's view of a machine: the front node for ids, metrics and the control database;
    the machine's app for every call (so to the slot's holder)."""

    def __init__(self, app: MachineApp) -> None:
        self.node = app.machine.front
        self._app = app

    async def __call__(self, method: str, path: str, headers: Any, body: bytes) -> Any:
        return await self._app(method, path, headers, body)


class MachineDoor(SmtpDoor):
    """``SmtpDoor`` whose every delivery goes through the machine's app."""

    def __init__(self, app: MachineApp, cluster_token: str, *, max_message_bytes: int) -> None:
        super().__init__(cast(NodeApp, _DoorApp(app)), cluster_token,
                         max_message_bytes=max_message_bytes)

    async def deliver(self, address: str, rcpt: Recipient, raw: bytes) -> str:
        data = b"Delivered-To: " + address.encode("utf-8", "replace") + b"\r\n" + raw
        source = "smtp:" + hashlib.sha256(rcpt.identity_id.encode() + b"\0" + raw).hexdigest()
        return await self._forward(rcpt, Ingest(source_id=source, raw=data))
