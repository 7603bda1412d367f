"""Reply shapes shared by several namespaces."""

from __future__ import annotations

import msgspec

__all__ = ["IdReply", "InitReply"]


class InitReply(msgspec.Struct):
    """``init``: True the first time, False when the same owner repeats it."""

    created: bool


class IdReply(msgspec.Struct):
    """``GET /ids/{namespace}/by-name/{name}`` and ``POST /ids/{namespace}/unique``."""

    id: str
