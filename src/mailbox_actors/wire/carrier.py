"""Carrier's wire (CA-14): ``submit`` and the receipt, ``get_email``, ``cancel``, ``resolve``,
``begin_transport``, ``record_transport_outcome``, ``apply_delivery_event``, and the operator's
delivery inspection (CA-10).

A receipt carries no address: a Message is known by its id, role and position (to, cc, bcc in
submission order). Limits a request must respect beyond its types (recipients, content size,
header rules) are checked by the mailbox at submit, naming the field.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from mailbox_actors.wire.post import PostInspectionRecord
from mailbox_actors.wire.transport import OutboundEmail, TransportOutcome

__all__ = [
    "ApplyDeliveryEvent", "BeginTransport", "CancelEmail", "DeliveryEventReply", "DeliveryRecord",
    "GetEmail", "InspectionAvailable", "InspectionPage", "InspectionUninitialized",
    "LearnMessageId", "LearnMessageIdReply",
    "MessageReceipt", "ProviderRejection", "Receipt", "RecordTransportOutcome", "ResolveEmail",
    "Submit", "TransportFailure", "TransportLease",
]

SourceId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Address = Annotated[str, msgspec.Meta(max_length=320)]
UnixMs = Annotated[int, msgspec.Meta(ge=0, le=2**53, description="absolute, Unix ms")]
ShortText = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Code = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Klass = Literal["temporary", "permanent"]
Role = Literal["to", "cc", "bcc"]


class Submit(msgspec.Struct, tag="submit", tag_field="op", forbid_unknown_fields=True,
             kw_only=True):
    """Queue one Email (CA-1). Replay with the same ``source_id`` and identical content answers
    the existing receipt; changed content, envelope, headers or expiry is ``conflict`` (CA-2)."""

    source_id: SourceId
    from_: Address = msgspec.field(name="from")
    to: list[Address] = []
    cc: list[Address] = []
    bcc: list[Address] = []
    subject: Annotated[str, msgspec.Meta(max_length=998)] = ""
    text: str | None = None
    html: str | None = None
    headers: dict[str, str] = {}
    send_before: UnixMs | None = None


class GetEmail(msgspec.Struct, tag="get_email", tag_field="op", forbid_unknown_fields=True):
    """The receipt of ``source_id``, or null when no such Email was submitted."""

    source_id: SourceId


class CancelEmail(msgspec.Struct, tag="cancel", tag_field="op", forbid_unknown_fields=True):
    """Before dispatch intent only: the Email ends ``superseded``; afterwards ``conflict``."""

    source_id: SourceId


class ResolveEmail(msgspec.Struct, tag="resolve", tag_field="op", forbid_unknown_fields=True,
                   kw_only=True):
    """An operator settles an ``outcome_unknown`` Email with evidence (CA-12). The Email is named
    by its ``source_id`` or by its ``email_id`` (the id delivery records show): exactly one."""

    source_id: SourceId | None = None
    email_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    outcome: Literal["provider_accepted", "rejected"]
    provider_message_id: ShortText | None = None  # required for provider_accepted
    code: Code | None = None  # required for rejected
    evidence: ShortText  # where the operator saw it (a ticket, a provider log line id)


class LearnMessageId(msgspec.Struct, tag="learn_message_id", tag_field="op",
                     forbid_unknown_fields=True):
    """The Message-ID a provider that rewrites it gave the Email (seen in its journal copy):
    recorded on the Email's Messages, so replies and bounces quoting it find them (CA-17).
    ``message_id`` with or without its angle brackets; a second, different one is ``conflict``."""

    email_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    message_id: Annotated[str, msgspec.Meta(min_length=3, max_length=998)]


class LearnMessageIdReply(msgspec.Struct, frozen=True):
    email_id: str
    message_id_header: str  # the one the Email was stamped with
    learned_message_id: str  # the provider's, in angle brackets
    changed: bool  # False: this id was learnt before (a replay)


class BeginTransport(msgspec.Struct, tag="begin_transport", tag_field="op",
                     forbid_unknown_fields=True):
    """For a dispatcher outside the actor: run the pre-dispatch checks on the next due Email (or
    the one named), commit dispatch intent, and hand it out with a lease. The dispatcher makes
    one attempt and reports it with ``record_transport_outcome`` before the lease ends; a lease
    that ends unreported becomes ``outcome_unknown``."""

    source_id: SourceId | None = None
    lease_ms: Annotated[int, msgspec.Meta(ge=1_000, le=3_600_000)] = 600_000


class RecordTransportOutcome(msgspec.Struct, tag="record_transport_outcome", tag_field="op",
                             forbid_unknown_fields=True):
    email_id: ShortText
    outcome: TransportOutcome


class ApplyDeliveryEvent(msgspec.Struct, tag="apply_delivery_event", tag_field="op",
                         forbid_unknown_fields=True, kw_only=True):
    """Delivery news for one Message (CA-9, CA-13), named by its ``msg_`` id, or by the Email's
    Message-ID header and the recipient's address (as a bounce names them)."""

    type: Literal["delivered", "bounced", "complained", "deferred"]
    bounce: Literal["hard", "soft"] | None = None  # required for bounced
    message_id: ShortText | None = None
    message_id_header: Annotated[str, msgspec.Meta(min_length=3, max_length=998)] | None = None
    recipient: Address | None = None
    provider_event_id: ShortText | None = None
    provider_timestamp_ms: UnixMs | None = None
    code: Code | None = None  # e.g. the DSN status "5.1.1"


class ProviderRejection(msgspec.Struct, frozen=True):
    code: str
    klass: Klass = msgspec.field(name="class")


class MessageReceipt(msgspec.Struct, frozen=True):
    message_id: str
    role: Role
    status: str  # core.carrier.states.MessageStatus
    code: str | None = None


class TransportFailure(msgspec.Struct, frozen=True):
    """The last failure to reach the provider (CA-16): its kind and when it happened."""

    kind: str  # e.g. "connect_failed", "dns_failed", "tls_failed", "timeout", "connection_lost"
    at_ms: int


class Receipt(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """CA-14's receipt. ``attempts`` counts definite provider rejections. ``last_transport_failure``
    appears once the provider could not be reached (CA-16); every other field is always there."""

    email_id: str
    source_id: str
    status: str  # core.carrier.states.EmailStatus
    message_id_header: str
    messages: list[MessageReceipt]
    attempts: int
    provider_message_id: str | None
    provider_rejection: ProviderRejection | None
    next_attempt_at_ms: int | None
    created_at_ms: int
    updated_at_ms: int
    last_transport_failure: TransportFailure | None = None


class TransportLease(msgspec.Struct, frozen=True, kw_only=True):
    """``begin_transport``'s answer: the Email to send (null: nothing due now) and its lease."""

    email: OutboundEmail | None
    lease_until_ms: int | None = None
    receipt: Receipt | None = None


class DeliveryEventReply(msgspec.Struct, frozen=True):
    message_id: str
    status: str  # the Message's status after the event
    changed: bool  # False: a duplicate, or news that does not move it forward
    duplicate: bool


class DeliveryRecord(msgspec.Struct, frozen=True, kw_only=True, tag="email", tag_field="kind"):
    """One Email as the operator sees it (CA-10): state, attempts, retry time and provider
    evidence; never addresses, bodies or headers. ``kind`` is ``email``, beside Post's records
    (``kind`` ``post``, PO-7) in the same scan."""

    email_id: str
    status: str
    attempts: int
    next_attempt_at_ms: int | None
    provider_message_id: str | None
    provider_rejection: ProviderRejection | None
    messages: int  # how many recipients
    refused_messages: int
    resolved: bool  # settled by an operator's resolve
    created_at_ms: int
    updated_at_ms: int


class InspectionAvailable(msgspec.Struct, frozen=True, tag="available", tag_field="status"):
    """One page: Emails and Post jobs in one key order (an Email's id, a Post job's producer
    key); ``next_cursor`` is the last record's key, null at the end."""

    records: list[DeliveryRecord | PostInspectionRecord]
    next_cursor: str | None


class InspectionUninitialized(msgspec.Struct, frozen=True, tag="uninitialized",
                              tag_field="status"):
    pass


InspectionPage = InspectionAvailable | InspectionUninitialized
