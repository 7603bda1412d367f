"""The SMTP door of a machine (CL-15): every machine may run one.

RCPT resolves in the cluster's control database (PostgreSQL, through the machine's front node,
as on one machine); DATA goes to the holder of the recipient mailbox's slot through the machine's
HTTP application: in process when this machine serves the slot, one hop when another does, and
``451`` while the slot has no holder (the app's ``unavailable``, a retryable refusal).
"""

from __future__ import annotations

from mailbox_actors.cluster.machine_app import MachineApp
from mailbox_actors.node.smtp_door import SmtpDoor

__all__ = ["machine_door"]


def machine_door(app: MachineApp, cluster_token: str, *, max_message_bytes: int) -> SmtpDoor:
    """The door of a machine: ids, metrics and the control database of its front node; every
    delivery and call through the machine's app (so to the slot's holder)."""
    front = app.machine.front
    return SmtpDoor(app, cluster_token, router=front.router, control_db=front.control_db,
                    ids=front.ids, clock=front.clock, metrics=front.metrics, owned_here=None,
                    max_message_bytes=max_message_bytes)
