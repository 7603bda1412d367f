"""A received message's raw source and an attachment's content (UI-2), read a chunk at a time.

``get_raw_message`` answers the bytes the mailbox received for a message (RFC 5322, as they came
through the door or ``ingest``), ``get_attachment`` one attachment's decoded content (``part``: its
index in ``get_message``'s list); each in chunks of at most 1 MB (``chunk`` 0, 1, ... until
``chunk + 1 == chunks``), so a 25 MB message never makes one 33 MB answer. Both answer null for a
message the mailbox does not hold. Replies carry the owner's own mail; logs and events never do.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

__all__ = ["SOURCE_REPLIES", "AttachmentContent", "GetAttachment", "GetRawMessage", "RawSource"]

RecordId = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Chunk = Annotated[int, msgspec.Meta(ge=0, le=100_000)]


class GetRawMessage(msgspec.Struct, tag="get_raw_message", tag_field="op",
                    forbid_unknown_fields=True):
    message_id: RecordId
    chunk: Chunk = 0


class RawSource(msgspec.Struct):
    """``kept`` is false for a message received before raw sources were kept (no bytes then)."""

    message_id: str
    kept: bool
    size_bytes: int
    chunk: int
    chunks: int
    data: bytes


class GetAttachment(msgspec.Struct, tag="get_attachment", tag_field="op",
                    forbid_unknown_fields=True):
    message_id: RecordId
    part: Annotated[int, msgspec.Meta(ge=0, le=10_000)]
    chunk: Chunk = 0


class AttachmentContent(msgspec.Struct):
    message_id: str
    part: int
    filename: str | None
    content_type: str
    size_bytes: int
    chunk: int
    chunks: int
    data: bytes


SOURCE_REPLIES: dict[str, Any] = {"get_raw_message": RawSource | None,
                                  "get_attachment": AttachmentContent | None}
