"""The tenant roster's Post events (IdentityMailbox -> TenantQuota) and TenantQuota's ``roster``
op. Ids only, never an address (EV-5)."""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["MemberJoined", "MemberLeft", "QuotaRoster", "RosterAddress", "RosterReply"]

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class RosterAddress(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tenant's TenantQuota, named by the tenant id."""

    tenant_id: _Id


class MemberJoined(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    identity_id: _Id
    mailbox_id: Annotated[str, msgspec.Meta(min_length=64, max_length=64)]


class MemberLeft(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    identity_id: _Id


class QuotaRoster(msgspec.Struct, tag="roster", tag_field="op", forbid_unknown_fields=True):
    pass


class RosterReply(msgspec.Struct):
    active: int   # identities that joined and have not left
    joined: int   # roster events applied, each exactly once
    left: int
