"""Which addresses an identity may own (IN-5): one plain addr-spec, compared without case."""

from __future__ import annotations

import re

__all__ = ["MAX_ADDRESS_CHARS", "normalize_address"]

MAX_ADDRESS_CHARS = 254  # RFC 5321's path limit less the brackets
_LOCAL = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}$")
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def normalize_address(address: str) -> str | None:
    """The address as stored and looked up (lower-cased, trimmed, angle brackets dropped), or
    None when it is not a plain ``local@domain`` of dot-atoms with a domain of two or more
    labels."""
    a = address.strip()
    if a.startswith("<") and a.endswith(">"):
        a = a[1:-1]
    a = a.lower()
    if len(a) > MAX_ADDRESS_CHARS or a.count("@") != 1:
        return None
    local, domain = a.split("@")
    if not _LOCAL.match(local) or local.startswith(".") or local.endswith(".") or ".." in local:
        return None
    labels = domain.split(".")
    if len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        return None
    return a
