"""Object ids (RT-1): 64 lowercase hex digits whose last 16 bytes authenticate the first 16.

As in workerd, the authenticator is an HMAC under a per-namespace key, so an id minted for one
namespace is refused by every other, and a random string is refused everywhere. Pure: the caller
passes the key and, for unique ids, the random bytes.
"""

from __future__ import annotations

import hmac
import re

__all__ = ["NAMESPACE_RE", "check_id", "has_id_form", "id_from_name", "id_from_random",
           "namespace_key"]

NAMESPACE_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def namespace_key(namespace: str, secret: bytes) -> bytes:
    """The per-namespace HMAC key, derived from the id secret and the namespace name."""
    return hmac.digest(secret, b"mailbox-actors/namespace/" + namespace.encode(), "sha256")


def _seal(key: bytes, head: bytes) -> str:
    return (head + hmac.digest(key, head, "sha256")[:16]).hex()


def id_from_name(key: bytes, name: str) -> str:
    """Deterministic id for ``name`` (workerd's idFromName)."""
    head = hmac.digest(key, b"name:" + name.encode("utf-8"), "sha256")[:16]
    return _seal(key, head)


def id_from_random(key: bytes, random16: bytes) -> str:
    """A new unique id from 16 random bytes (workerd's newUniqueId)."""
    if len(random16) != 16:
        raise ValueError("random16 must be 16 bytes")
    return _seal(key, random16)


def has_id_form(s: object) -> bool:
    """Whether ``s`` is 64 lowercase hex digits (what ``check_id`` checks before the HMAC)."""
    return isinstance(s, str) and _HEX64.fullmatch(s) is not None


def check_id(key: bytes, s: object) -> str | None:
    """Return the reason ``s`` is not an id of this namespace, or None when it is."""
    if not isinstance(s, str):
        return "object id must be a string"
    if not _HEX64.fullmatch(s):
        return "object id must be 64 lowercase hex digits"
    raw = bytes.fromhex(s)
    if not hmac.compare_digest(raw[16:], hmac.digest(key, raw[:16], "sha256")[:16]):
        return "object id does not belong to this namespace"
    return None
