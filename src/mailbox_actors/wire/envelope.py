"""The version-1 RPC envelope (RPC-1) and result shapes (RPC-2) shared by every namespace.

``Envelope[T]`` is generic over a namespace's tagged request union; each namespace builds one
module-level decoder for ``Envelope[ItsRequest]``. Results are ``{"ok": value}`` or
``{"err": ErrorBody}``.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

import msgspec

from mailbox_actors.wire.errors import ErrorBody

__all__ = [
    "ENVELOPE_VERSION",
    "Envelope",
    "OwnerId",
    "RequestId",
    "RpcReply",
    "VersionProbe",
]

ENVELOPE_VERSION = 1

T = TypeVar("T")

# Patterns end in "$(?!\n)": msgspec checks them with Python's re, where "$" also matches before a
# final newline; JSON Schema (ECMA) reads "$" as the end, and the lookahead holds there trivially.
RequestId = Annotated[str, msgspec.Meta(pattern=r"^req_[0-9A-Za-z]{1,64}$(?!\n)",
                                        description="req_ followed by a ULID")]
OwnerId = Annotated[str, msgspec.Meta(min_length=1, max_length=128,
                                      pattern=r"^[A-Za-z0-9_\-:.]+$(?!\n)")]


class Envelope(msgspec.Struct, Generic[T], kw_only=True):
    """``{"v":1, "tenant_id", "identity_id", "request_id", "actor_key_id", "deadline_ms", "req"}``."""

    v: int
    tenant_id: OwnerId | None = None
    identity_id: OwnerId | None = None
    request_id: RequestId
    actor_key_id: OwnerId | None = None
    deadline_ms: Annotated[int, msgspec.Meta(ge=0, description="absolute, Unix ms")]
    req: T


class VersionProbe(msgspec.Struct):
    """Decoded when an envelope fails validation, to tell ``unsupported_version`` apart."""

    v: Any = None


class RpcReply(msgspec.Struct, omit_defaults=True):
    """A decoded result: exactly one of ``ok`` and ``err`` is meaningful."""

    ok: Any = None
    err: ErrorBody | None = None
