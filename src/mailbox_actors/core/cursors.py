"""Opaque page cursors (UI-1): a position in one listing, signed so that only this cluster's own
cursor for the same listing is taken back.

A cursor is ``base64url(tag || JSON [kind, scope, position] XOR keystream)``: the tag is an HMAC
of the clear text, and the keystream HMAC-SHA256 of the tag in counter mode, so a position (a key
a page ended on, which may be content) is not readable in it. The keys derive from the cluster's id
secret, so every node reads every other node's cursors; one from another cluster, another listing
(``kind`` and ``scope``) or edited by hand is ``invalid_request``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

import msgspec

from mailbox_actors.wire.errors import InvalidRequest

__all__ = ["MAX_CURSOR_CHARS", "CursorCodec"]

MAX_CURSOR_CHARS = 2048
_MAC_BYTES = 12
_ENC = msgspec.json.Encoder()
_DEC = msgspec.json.Decoder(tuple[str, str, list[Any]])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorCodec:
    """Makes and checks cursors under one key (derived from the id secret)."""

    __slots__ = ("_key", "_stream_key")

    def __init__(self, secret: str | bytes) -> None:
        raw = secret.encode() if isinstance(secret, str) else secret
        self._key = hashlib.sha256(b"mailbox-actors inspection cursor\x00" + raw).digest()
        self._stream_key = hashlib.sha256(b"mailbox-actors cursor stream\x00" + raw).digest()

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:_MAC_BYTES]

    def _xor(self, tag: bytes, data: bytes) -> bytes:
        stream = b"".join(hmac.new(self._stream_key, tag + i.to_bytes(4, "big"),
                                   hashlib.sha256).digest() for i in range(len(data) // 32 + 1))
        return bytes(a ^ b for a, b in zip(data, stream, strict=False))

    def make(self, kind: str, scope: str, position: list[Any]) -> str:
        payload = _ENC.encode((kind, scope, position))
        tag = self._mac(payload)
        return _b64(tag + self._xor(tag, payload))

    def read(self, cursor: str | None, kind: str, scope: str, field: str = "cursor",
             ) -> list[Any] | None:
        """The position ``cursor`` holds (None for no cursor: the first page); a cursor that is
        not this listing's own is ``invalid_request`` naming ``field``."""
        if cursor is None or cursor == "":
            return None
        bad = InvalidRequest(f"{field} is not a cursor of this listing (take next_cursor from "
                             "the previous page of the same listing)", details={"field": field})
        if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS:
            raise bad
        try:
            raw = _unb64(cursor)
        except (binascii.Error, ValueError):
            raise bad from None
        tag = raw[:_MAC_BYTES]
        payload = self._xor(tag, raw[_MAC_BYTES:])
        if len(tag) != _MAC_BYTES or not hmac.compare_digest(tag, self._mac(payload)):
            raise bad
        try:
            got_kind, got_scope, position = _DEC.decode(payload)
        except msgspec.DecodeError:
            raise bad from None
        if got_kind != kind or got_scope != scope:
            raise bad
        return position
