"""Post's wire types (PO-1, PO-4): the envelope a receiver is handed and the answer it gives.

A receiving namespace adds ``PostDeliver`` (op ``post_deliver``) to its request union and answers
``PostAnswer``. ``address`` and ``event`` travel as JSON objects; the receiver decodes them with
the route's own Structs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

__all__ = ["DeadLetterPage", "PostAnswer", "PostDeadLetters", "PostDeliver", "PostEnvelope",
           "PostInspectionRecord", "PostRecord", "PostRetry", "PostRetryReply"]

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class PostEnvelope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    key: _Name            # the producer's stable key; identifies the event across all senders
    route: _Name          # the route's name: which event kind this is
    kind: _Name           # the recipient's address-kind label, shared by every route to it
    producer: Annotated[str, msgspec.Meta(max_length=200)]
    seq: int              # the producer's order for this address
    address: dict[str, Any]
    event: dict[str, Any]  # the staged event, or the prepared fact when the route prepares one


class PostDeliver(msgspec.Struct, tag="post_deliver", tag_field="op", forbid_unknown_fields=True):
    envelope: PostEnvelope
    attempt: Annotated[int, msgspec.Meta(ge=1)] = 1


class PostAnswer(msgspec.Struct, omit_defaults=True):
    status: Literal["delivered", "duplicate", "refused"]
    receipt: dict[str, Any] | None = None
    reason: str | None = None


class PostRecord(msgspec.Struct, frozen=True):
    """A producer's view of one of its envelopes: ``latest`` and ``dead_letters`` answer these."""

    key: str
    route: str
    state: str  # queued | running | failed | delivered | dead
    attempts: int
    seq: int
    address: dict[str, Any]
    event: dict[str, Any]
    prepared: dict[str, Any] | None
    next_attempt_at_ms: int | None
    reason: str | None
    receipt: dict[str, Any] | None


class DeadLetterPage(msgspec.Struct, frozen=True):
    letters: list[PostRecord]
    next_cursor: str | None  # continue with after=next_cursor until None; a page may be empty


class PostInspectionRecord(msgspec.Struct, frozen=True, omit_defaults=True, tag="post",
                           tag_field="kind"):
    """An operator's view (PO-7): never an address or an event. Delivered rows keep only their key
    and state; ``attempts`` counts receiver invocations. ``kind`` is ``post``, beside Carrier's
    own records (``kind`` ``email``) in the same scan."""

    key: str
    state: str
    attempts: int | None = None
    retry_at_ms: int | None = None
    reason: str | None = None


# ---- a producer's own ops over RPC (PO-6): any producing namespace may add these to its union --


class PostDeadLetters(msgspec.Struct, tag="post_dead_letters", tag_field="op",
                      forbid_unknown_fields=True):
    after: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=64)] = 32


class PostRetry(msgspec.Struct, tag="post_retry", tag_field="op", forbid_unknown_fields=True):
    key: _Name


class PostRetryReply(msgspec.Struct):
    action: Literal["expedite", "requeue", "unchanged", "delivered"]
