"""IdentityMailbox's requests and replies (OBJ-1), namespace ``identity_mailbox``."""

from __future__ import annotations

import msgspec

__all__ = ["MailboxErase", "MailboxInit", "MailboxRequest", "MailboxStatus", "MailboxStatusReply",
           "EraseReply", "InitReply"]


class MailboxInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    """The owner comes from the envelope's tenant_id and identity_id."""


class MailboxStatus(msgspec.Struct, tag="status", tag_field="op", forbid_unknown_fields=True):
    pass


class MailboxErase(msgspec.Struct, tag="erase", tag_field="op", forbid_unknown_fields=True):
    pass


MailboxRequest = MailboxInit | MailboxStatus | MailboxErase


class InitReply(msgspec.Struct):
    created: bool


class MailboxStatusReply(msgspec.Struct):
    tenant_id: str
    identity_id: str
    schema_version: int
    size_bytes: int
    alarm: int | None
    created_at_ms: int


class EraseReply(msgspec.Struct):
    erased: bool
    erased_at_ms: int
