"""TenantQuota's requests and replies (OBJ-2), namespace ``tenant_quota``."""

from __future__ import annotations

from typing import Annotated

import msgspec

from mailbox_actors.wire.post import PostAnswer, PostDeliver
from mailbox_actors.wire.roster import QuotaRoster, RosterReply
from mailbox_actors.wire.shared_replies import InitReply

__all__ = [
    "QuotaInit", "QuotaRelease", "QuotaRequest", "QuotaReserve", "QuotaStatus", "QuotaUsage",
    "QUOTA_REPLIES", "ReleaseReply", "ReserveReply", "QuotaStatusReply", "UsageReply",
]

Limit = Annotated[int, msgspec.Meta(ge=1, le=1_000_000_000)]
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class QuotaInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    per_minute: Limit
    per_day: Limit
    # True: a quota that already has limits keeps them (creating an identity initialises its
    # tenant's quota this way, so an operator's limits are never overwritten by it).
    keep_existing: bool = False


class QuotaReserve(msgspec.Struct, tag="reserve", tag_field="op", forbid_unknown_fields=True):
    key: Key
    count: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1
    identity_id: Annotated[str, msgspec.Meta(max_length=128)] | None = None


class QuotaRelease(msgspec.Struct, tag="release", tag_field="op", forbid_unknown_fields=True):
    reservation_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    # Give back this many of the reservation's count (a block reserved ahead and not all used);
    # None: all that is left of it.
    count: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None


class QuotaUsage(msgspec.Struct, tag="usage", tag_field="op", forbid_unknown_fields=True):
    pass


class QuotaStatus(msgspec.Struct, tag="status", tag_field="op", forbid_unknown_fields=True):
    pass


# post_deliver: the tenant roster's events arrive by Post (objects/roster.py).
QuotaRequest = (QuotaInit | QuotaReserve | QuotaRelease | QuotaUsage | QuotaStatus | PostDeliver
                | QuotaRoster)


class ReserveReply(msgspec.Struct):
    reservation_id: str
    granted: bool = True


class ReleaseReply(msgspec.Struct):
    released: bool


class UsageReply(msgspec.Struct):
    minute_used: int
    minute_limit: int
    day_used: int
    day_limit: int


class QuotaStatusReply(msgspec.Struct):
    tenant_id: str
    per_minute: int
    per_day: int
    schema_version: int
    alarm: int | None


QUOTA_REPLIES: dict[str, type] = {"init": InitReply, "reserve": ReserveReply,
                                  "release": ReleaseReply, "usage": UsageReply,
                                  "status": QuotaStatusReply, "post_deliver": PostAnswer,
                                  "roster": RosterReply}
