"""Search over an IdentityMailbox's received mail (IN-8, IN-9, IN-10): ``search_messages``,
``attachment_text_ready`` and ``reparse``.

``query`` is an SQLite FTS5 query (words, "phrases", ``OR``, ``NOT``, ``prefix*``, a column filter
``subject:``, ``body:`` or ``attachments:``); one FTS5 cannot parse is ``invalid_request`` with
``details.position``. Replies carry the owner's own mail; logs and events never carry a query or
a text.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

__all__ = ["SEARCH_REPLIES", "AttachmentTextReady", "AttachmentTextReply", "Reparse",
           "ReparseReply", "SearchFilters", "SearchHit", "SearchMessages", "SearchReply"]

RecordId = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Millis = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
Address = Annotated[str, msgspec.Meta(min_length=1, max_length=320)]


class SearchFilters(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Each given filter narrows the search: the sender, a recipient (to, cc or delivered-to;
    compared case-insensitively), a thread (any of a merged thread's ids), messages with (or
    without) attachments, and a received range ``[received_after_ms, received_before_ms)``."""

    from_: Address | None = msgspec.field(default=None, name="from")
    to: Address | None = None
    thread_id: RecordId | None = None
    has_attachment: bool | None = None
    received_after_ms: Millis | None = None
    received_before_ms: Millis | None = None


class SearchMessages(msgspec.Struct, tag="search_messages", tag_field="op",
                     forbid_unknown_fields=True):
    """Full-text search over subject, text and attachment text; newest first, paged with the
    previous page's ``next_cursor`` (a page may be short and still continue)."""

    query: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
    filters: SearchFilters | None = None
    cursor: Annotated[str, msgspec.Meta(max_length=32)] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=100)] = 20


class SearchHit(msgspec.Struct):
    message_id: str
    thread_id: str
    from_: str = msgspec.field(name="from")
    subject: str = ""
    received_at_ms: int = 0
    size_bytes: int = 0
    has_attachment: bool = False


class SearchReply(msgspec.Struct):
    messages: list[SearchHit]
    next_cursor: str | None


class AttachmentTextReady(msgspec.Struct, tag="attachment_text_ready", tag_field="op",
                          forbid_unknown_fields=True):
    """Text an outside extractor took from attachment ``part`` (its index in ``get_message``'s
    list): stored once per message and part, and searchable from then on. Another text for the
    same part is ``conflict`` unless ``replace``."""

    message_id: RecordId
    part: Annotated[int, msgspec.Meta(ge=0, le=10_000)]
    text: str
    replace: bool = False


class AttachmentTextReply(msgspec.Struct):
    message_id: str
    part: int
    stored: bool  # False: the same text was already there (a replay)


class Reparse(msgspec.Struct, tag="reparse", tag_field="op", forbid_unknown_fields=True):
    """Parse one received message's stored source again with the current parser (IN-8), or,
    with ``all``, every message, in pages from the mailbox's own alarm (resumed after a crash).
    Ids and threads stay; parsed fields, defects, attachments and the search index change."""

    message_id: RecordId | None = None  # exactly one of message_id and all: true
    all: bool = False


class ReparseReply(msgspec.Struct):
    reparsed: int  # messages parsed again by this call (0 with all: the alarm does them)
    scheduled: bool  # all: the pages run from alarm:reparse
    defects: list[str] = []  # the message's defects as the current parser finds them


SEARCH_REPLIES: dict[str, Any] = {"search_messages": SearchReply,
                                  "attachment_text_ready": AttachmentTextReply,
                                  "reparse": ReparseReply}
