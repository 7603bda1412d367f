"""IdentityMailbox's requests and replies (OBJ-1), namespace ``identity_mailbox``."""

from __future__ import annotations

from typing import Any

import msgspec

from mailbox_actors.wire.carrier import (
    ApplyDeliveryEvent,
    BeginTransport,
    CancelEmail,
    DeliveryEventReply,
    GetEmail,
    LearnMessageId,
    LearnMessageIdReply,
    Receipt,
    RecordTransportOutcome,
    ResolveEmail,
    Submit,
    TransportLease,
)
from mailbox_actors.wire.events import EmitEvent, EventsReply, GetEvents
from mailbox_actors.wire.inbound import INBOUND_REPLIES, InboundRequest
from mailbox_actors.wire.post import DeadLetterPage, PostDeadLetters, PostRetry, PostRetryReply
from mailbox_actors.wire.search import SEARCH_REPLIES, AttachmentTextReady, Reparse, SearchMessages
from mailbox_actors.wire.shared_replies import InitReply
from mailbox_actors.wire.sources import SOURCE_REPLIES, GetAttachment, GetRawMessage

__all__ = ["MailboxErase", "MailboxInit", "MailboxRequest", "MailboxStatus", "MailboxStatusReply",
           "EmittedReply", "EraseReply", "MAILBOX_REPLIES"]


class MailboxInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    """The owner comes from the envelope's tenant_id and identity_id."""


class MailboxStatus(msgspec.Struct, tag="status", tag_field="op", forbid_unknown_fields=True):
    pass


class MailboxErase(msgspec.Struct, tag="erase", tag_field="op", forbid_unknown_fields=True):
    pass


MailboxRequest = (MailboxInit | MailboxStatus | MailboxErase | GetEvents | EmitEvent
                  | Submit | GetEmail | CancelEmail | ResolveEmail | BeginTransport
                  | RecordTransportOutcome | ApplyDeliveryEvent | LearnMessageId
                  | PostDeadLetters | PostRetry  # the roster's Post letters (objects/roster.py)
                  | InboundRequest | SearchMessages | AttachmentTextReady | Reparse
                  | GetRawMessage | GetAttachment)  # UI-2: raw sources, attachment content


class MailboxStatusReply(msgspec.Struct):
    tenant_id: str
    identity_id: str
    schema_version: int
    size_bytes: int
    alarm: int | None
    created_at_ms: int
    messages: int = 0  # received messages held (IN-6)
    threads: int = 0  # threads holding at least one of them


class EmittedReply(msgspec.Struct):
    id: str


class EraseReply(msgspec.Struct):
    erased: bool
    erased_at_ms: int


MAILBOX_REPLIES: dict[str, Any] = {"post_dead_letters": DeadLetterPage, "post_retry": PostRetryReply,
                                    "init": InitReply, "status": MailboxStatusReply,
                                    "erase": EraseReply, "get_events": EventsReply,
                                    "emit_event": EmittedReply,
                                    "submit": Receipt, "get_email": Receipt | None,
                                    "cancel": Receipt,
                                    "resolve": Receipt, "begin_transport": TransportLease,
                                    "record_transport_outcome": Receipt,
                                    "apply_delivery_event": DeliveryEventReply,
                                    "learn_message_id": LearnMessageIdReply, **INBOUND_REPLIES,
                                    **SEARCH_REPLIES, **SOURCE_REPLIES}
