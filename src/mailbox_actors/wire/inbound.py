"""The inbound ops of IdentityMailbox (IN-1, IN-3, IN-4), exactly the wire of IN-7.

``raw`` travels as base64 inside the JSON (msgspec's encoding of ``bytes``). Replies carry the
owner's own mail (``get_message``); logs and events never do.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

__all__ = ["INBOUND_OPS", "INBOUND_REPLIES", "AttachmentView", "DeleteMessage",
           "DeleteMessageReply", "GetMessage", "GetThread",
           "HeaderMatch", "InboundRequest", "Ingest", "IngestReply", "ListMessages", "MessageList",
           "MessageSummary", "MessageView", "RegisterWait", "RegisterWaitReply", "ThreadView",
           "WaitFilter", "WaitPoll", "WaitPollReply", "WaitStatus"]

SourceId = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
RecordId = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Millis = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
FilterText = Annotated[str, msgspec.Meta(min_length=1, max_length=998)]


class Ingest(msgspec.Struct, tag="ingest", tag_field="op", forbid_unknown_fields=True):
    """One RFC 5322 message; a replay of ``source_id`` with the same bytes is a duplicate."""

    source_id: SourceId
    raw: bytes


class IngestReply(msgspec.Struct):
    message_id: str
    thread_id: str
    duplicate: bool
    defects: list[str]


class HeaderMatch(msgspec.Struct, forbid_unknown_fields=True):
    name: FilterText
    value: Annotated[str, msgspec.Meta(max_length=998)]


class WaitFilter(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Every field that is set must match. Addresses compare without case; ``subject_contains``
    without case; a header's name without case and its decoded value exactly."""

    from_: FilterText | None = msgspec.field(default=None, name="from")
    to: FilterText | None = None
    subject_contains: FilterText | None = None
    header: HeaderMatch | None = None
    received_after_ms: Millis | None = None


class RegisterWait(msgspec.Struct, tag="register_wait", tag_field="op",
                   forbid_unknown_fields=True):
    filter: WaitFilter
    expires_at_ms: Millis


class RegisterWaitReply(msgspec.Struct):
    wait_id: str


class WaitPoll(msgspec.Struct, tag="wait_poll", tag_field="op", forbid_unknown_fields=True):
    wait_id: RecordId


class WaitStatus:
    MATCHED = "matched"
    PENDING = "pending"
    EXPIRED = "expired"


class WaitPollReply(msgspec.Struct, omit_defaults=True):
    """``{"status":"matched","message_id","thread_id"}``, ``{"status":"pending"}`` or
    ``{"status":"expired"}``."""

    status: str
    message_id: str | None = None
    thread_id: str | None = None


class GetMessage(msgspec.Struct, tag="get_message", tag_field="op", forbid_unknown_fields=True):
    message_id: RecordId


class AttachmentView(msgspec.Struct):
    filename: str | None
    content_type: str
    size: int


class MessageView(msgspec.Struct):
    message_id: str
    thread_id: str
    message_id_header: str | None
    from_: str = msgspec.field(name="from")
    to: list[str] = []
    cc: list[str] = []
    subject: str = ""
    date_ms: int | None = None
    received_at_ms: int = 0
    text: str | None = None
    html: str | None = None
    headers: list[tuple[str, str]] = []
    attachments: list[AttachmentView] = []
    defects: list[str] = []


class GetThread(msgspec.Struct, tag="get_thread", tag_field="op", forbid_unknown_fields=True):
    thread_id: RecordId


class ThreadView(msgspec.Struct):
    thread_id: str
    message_ids: list[str]


class ListMessages(msgspec.Struct, tag="list_messages", tag_field="op",
                   forbid_unknown_fields=True):
    """Newest first; ``cursor`` is the previous page's ``next_cursor``."""

    thread_id: RecordId | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=200)] = 50
    cursor: Annotated[str, msgspec.Meta(max_length=32)] | None = None


class MessageSummary(msgspec.Struct):
    message_id: str
    thread_id: str
    from_: str = msgspec.field(name="from")
    subject: str = ""
    received_at_ms: int = 0
    size_bytes: int = 0


class MessageList(msgspec.Struct):
    messages: list[MessageSummary]
    next_cursor: str | None


class DeleteMessage(msgspec.Struct, tag="delete_message", tag_field="op",
                    forbid_unknown_fields=True):
    message_id: RecordId


class DeleteMessageReply(msgspec.Struct):
    deleted: bool


InboundRequest = (Ingest | RegisterWait | WaitPoll | GetMessage | GetThread | ListMessages
                  | DeleteMessage)
INBOUND_OPS = (Ingest, RegisterWait, WaitPoll, GetMessage, GetThread, ListMessages, DeleteMessage)
# op -> reply shape, for the published contract; get_message and get_thread answer null for an id
# the mailbox does not hold.
INBOUND_REPLIES: dict[str, Any] = {
    "ingest": IngestReply, "register_wait": RegisterWaitReply, "wait_poll": WaitPollReply,
    "get_message": MessageView | None, "get_thread": ThreadView | None,
    "list_messages": MessageList, "delete_message": DeleteMessageReply}
