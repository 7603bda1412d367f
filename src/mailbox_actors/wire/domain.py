"""DomainMonitor's requests and replies (OBJ-3), namespace ``domain_monitor``."""

from __future__ import annotations

from typing import Annotated

import msgspec

from mailbox_actors.wire.shared_replies import InitReply

__all__ = ["DOMAIN_PATTERN", "DOMAIN_REPLIES", "DomainInit", "DomainRequest", "DomainStatus",
           "DomainStatusReply"]

# A DNS name with an alphabetic top-level label; the control database stores domains by it too.
DOMAIN_PATTERN = r"^(?=.{3,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$(?!\n)"
DomainName = Annotated[str, msgspec.Meta(min_length=3, max_length=253,
                                         pattern=DOMAIN_PATTERN)]  # see envelope.py


class DomainInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    domain: DomainName


class DomainStatus(msgspec.Struct, tag="status", tag_field="op", forbid_unknown_fields=True):
    pass


DomainRequest = DomainInit | DomainStatus


class DomainStatusReply(msgspec.Struct):
    tenant_id: str
    domain: str
    state: str
    schema_version: int
    alarm: int | None


DOMAIN_REPLIES: dict[str, type] = {"init": InitReply, "status": DomainStatusReply}
