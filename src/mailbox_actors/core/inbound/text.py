"""Small pieces every part of inbound parsing shares: the defect list, text of 8-bit header
values, UTF-8 caps, and a guard that turns a reader's exception into a defect."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_DEFECTS", "Defects", "cap_utf8", "guard", "text_of"]

MAX_DEFECTS = 64
# Bytes beyond ASCII in a compat32 value: found by one C-level search, not a loop per character
# (every header name and value of every message goes through text_of).
_SURROGATE = re.compile("[\udc80-\udcff]")


class Defects:
    def __init__(self) -> None:
        self.items: dict[str, None] = {}

    def add(self, name: str) -> None:
        if len(self.items) < MAX_DEFECTS:
            self.items.setdefault(name, None)


def text_of(value: str, d: Defects, what: str) -> str:
    """A compat32 value (bytes beyond ASCII arrive as surrogates) as text: UTF-8 when it is,
    else replaced characters and a defect. NULs are replaced too (they end C strings)."""
    if not value.isascii() and _SURROGATE.search(value):
        raw = value.encode("ascii", "surrogateescape")
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            value = raw.decode("utf-8", "replace")
            d.add(f"header_8bit_undecodable:{what}")
    if "\0" in value:
        d.add("nul_bytes")
        value = value.replace("\0", "\ufffd")
    return value


def cap_utf8(text: str, cap: int) -> tuple[str, bool]:
    if len(text) <= cap and text.isascii():  # one byte a character: nothing to measure
        return text, False
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", "ignore"), True


def guard(fn: Callable[[], Any], default: Any, d: Defects, defect: str) -> Any:
    try:
        return fn()
    except Exception:
        d.add(defect)
        return default
