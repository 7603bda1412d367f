"""Notifier's requests and replies (OBJ-4), namespace ``notifier``, and the DomainMonitor event it
receives by Post. Events and replies carry domain names, states and ids; the recipients' addresses
are the tenant's own settings, answered only by ``status`` to the tenant."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from mailbox_actors.wire.carrier import GetEmail, Receipt
from mailbox_actors.wire.post import PostAnswer, PostDeliver
from mailbox_actors.wire.shared_replies import InitReply

__all__ = ["NOTIFIER_REPLIES", "DomainStateChanged", "NotifierAddress", "NotifierInit",
           "NotifierRequest", "NotifierStatus", "NotifierStatusReply", "SetRecipients",
           "SetRecipientsReply", "StateKind"]

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Address = Annotated[str, msgspec.Meta(min_length=3, max_length=320)]
StateKind = Literal["domain.failing", "domain.failed", "domain.recovered"]


class NotifierAddress(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tenant's Notifier, named by the tenant id."""

    tenant_id: _Id


class DomainStateChanged(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One of DomainMonitor's state events, as Post carries it to the tenant's Notifier."""

    domain: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    kind: StateKind
    state: str
    at_ms: Annotated[int, msgspec.Meta(ge=0)]


class NotifierInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    """The owner comes from the envelope's tenant_id."""


class SetRecipients(msgspec.Struct, tag="set_recipients", tag_field="op",
                    forbid_unknown_fields=True):
    """Who the tenant's notifications go to, and from which address (replaces the last set;
    an empty list sends none)."""

    from_: Address = msgspec.field(name="from")
    recipients: Annotated[list[Address], msgspec.Meta(max_length=20)] = []


class SetRecipientsReply(msgspec.Struct):
    recipients: int


class NotifierStatus(msgspec.Struct, tag="status", tag_field="op", forbid_unknown_fields=True):
    pass


class NotifierStatusReply(msgspec.Struct):
    tenant_id: str
    from_: str | None = msgspec.field(name="from")
    recipients: list[str]
    notifications: int  # emails submitted (one per domain, kind and hour at most)
    coalesced: int  # state events folded into a notification already sent that hour
    unsent: int  # state events that found no recipients set


NotifierRequest = NotifierInit | SetRecipients | NotifierStatus | GetEmail | PostDeliver

NOTIFIER_REPLIES: dict[str, Any] = {
    "init": InitReply, "set_recipients": SetRecipientsReply, "status": NotifierStatusReply,
    "get_email": Receipt | None, "post_deliver": PostAnswer}
