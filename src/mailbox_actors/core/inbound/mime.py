"""The body of a message (IN-1): a walk over its MIME parts, without recursion and under caps,
into the text and html bodies and the attachments (name, type, size, content)."""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable
from email import policy
from email.message import Message
from typing import Any

import msgspec

from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.core.inbound.split import Split
from mailbox_actors.core.inbound.text import Defects, cap_utf8, guard, text_of

__all__ = ["Body", "ParsedAttachment"]


class ParsedAttachment(msgspec.Struct, frozen=True):
    filename: str | None
    content_type: str
    size: int  # of the decoded content, stored or not
    content: bytes | None  # None: over max_attachment_bytes, not stored


_CACHED_VALUE_CHARS = 256
# Transfer encodings compat32's get_payload(decode=True) undoes (compared as it compares them).
_DECODED = frozenset({"quoted-printable", "base64", "x-uuencode", "uuencode", "uue", "x-uue"})


@functools.lru_cache(maxsize=256)
def _charset_of(content_type: str) -> str | None:
    """The charset parameter of a plain-ASCII Content-Type value, read by compat32 as the part
    would read it (the same few values recur in every message: parsed once)."""
    probe = Message(policy=policy.compat32)
    probe["content-type"] = content_type
    return probe.get_content_charset("us-ascii")


def _charset(part: Message) -> str | None:
    value = part.get("content-type")
    if value is None or (isinstance(value, str) and value.isascii()):
        return _ascii_charset(value)
    return part.get_content_charset("us-ascii")  # 8-bit bytes: compat32 wraps them in a Header


def _ascii_charset(value: str | None) -> str | None:
    """The charset of a part whose first Content-Type value is ``value`` (plain ASCII) or that
    has none."""
    if value is None:
        return "us-ascii"
    # Only short values are kept: the cache is per process, and hostile mail can carry
    # Content-Type values as long as a header may be (256 of those would pin a lot).
    return _charset_of(value) if len(value) <= _CACHED_VALUE_CHARS else \
        _charset_of.__wrapped__(value)


def _decode_text(part: Message, data: bytes, d: Defects) -> str:
    return _decoded(lambda: _charset(part), data, d)


def _decoded(charset_of: Callable[[], str | None], data: bytes, d: Defects) -> str:
    """``data`` as text in the charset ``charset_of`` reads (UTF-8 or replaced characters when
    it cannot be used), with a defect for what could not be read."""
    charset = guard(charset_of, "us-ascii", d, "charset_unreadable") or "us-ascii"
    try:
        codecs.lookup(charset)
    except (LookupError, ValueError):
        d.add("charset_unknown")
        charset = "utf-8"
    for cs in (charset, "utf-8"):
        try:
            text = data.decode(cs)
            break
        except (UnicodeDecodeError, LookupError):
            continue
    else:
        d.add("body_undecodable")
        text = data.decode(charset, "replace")
    if "\0" in text:
        d.add("nul_bytes")
        text = text.replace("\0", "\ufffd")
    return text


def _filename(part: Message, d: Defects) -> str | None:
    """The attachment's name from Content-Disposition (else Content-Type's ``name``), with UTF-8
    bytes and RFC 2231 / encoded-word forms decoded."""
    for header, param in (("content-disposition", "filename"), ("content-type", "name")):
        # The raw value: compat32's get() wraps 8-bit values in a Header object.
        raw = next((v for n, v in part.raw_items() if n.lower() == header), None)
        if raw is None or param not in raw.lower():  # no name there: skip the costly parse
            continue
        try:
            parsed = policy.default.header_fetch_parse(header, text_of(raw, d, "filename"))
            value = parsed.params.get(param)
        except Exception:
            value = guard(part.get_filename, None, d, "filename_unreadable")
        if value:
            return str(value)
    return None


class Body:
    def __init__(self, lim: InboundLimits, d: Defects) -> None:
        self.lim, self.d = lim, d
        self.text: str | None = None
        self.html: str | None = None
        self.attachments: list[ParsedAttachment] = []
        self.stored = 0

    def walk(self, root: Message) -> None:
        """Depth-first, in document order, without recursion (depth and parts are capped)."""
        stack: list[tuple[Message, int]] = [(root, 0)]
        parts = 0
        while stack:
            part, depth = stack.pop()
            parts += 1
            if parts > self.lim.max_mime_parts:
                self.d.add("mime_parts_truncated")
                return
            for defect in getattr(part, "defects", ()):
                self.d.add(type(defect).__name__)
            ctype = guard(part.get_content_type, "application/octet-stream", self.d,
                           "content_type_unreadable")
            if part.is_multipart() and ctype != "message/rfc822":
                if depth >= self.lim.max_mime_depth:
                    self.d.add("mime_depth_exceeded")
                    continue
                children: Any = guard(part.get_payload, [], self.d, "mime_unreadable")
                stack.extend((c, depth + 1) for c in reversed(children)
                             if isinstance(c, Message))
                continue
            self.leaf(part, ctype)

    def plain(self, split: Split) -> bool:
        """What ``walk`` reads from the message ``split.as_message(split)`` builds (one part; no
        multipart or ``message/`` type named in its headers), read from the split itself when it
        is plain text with no disposition, no name and no transfer encoding to undo: its text.
        False: nothing was read; ``walk`` the message. (The walk's type, disposition and name
        readers, and building the message, cost more than the decoding on such a message.)
        Tested equal to ``walk`` over the hostile corpus."""
        if self.lim.max_mime_parts < 1:
            return False
        ctype = cte = None
        for name, value in split[0]:  # compat32 reads the first field of each name
            low = name.lower()
            if low == "content-type":
                ctype = value if ctype is None else ctype
            elif low == "content-transfer-encoding":
                cte = value if cte is None else cte
            elif low == "content-disposition":
                return False
        if ctype is not None:
            if not ctype.isascii() or "name" in ctype.lower():
                return False
            main = ctype.partition(";")[0].strip().lower()
            if main != "text/plain" and main.count("/") == 1:  # compat32: not one '/', text/plain
                return False
        if cte is not None and (not cte.isascii() or cte.lower() in _DECODED):
            return False
        # The body's bytes, as the walk's leaf reads them: compat32's get_payload(decode=True)
        # gives back the bytes its payload was decoded from when there is nothing to undo.
        data = split[1]
        self.text, cut = cap_utf8(_decoded(functools.partial(_ascii_charset, ctype), data,
                                           self.d), self.lim.max_text_bytes)
        if cut:
            self.d.add("text_truncated")
        return True

    def leaf(self, part: Message, ctype: str) -> None:
        d = self.d
        disposition = guard(part.get_content_disposition, None, d, "disposition_unreadable")
        filename = _filename(part, d)
        if ctype == "message/rfc822":
            inner: Any = guard(lambda: part.get_payload(), [], d, "mime_unreadable")
            data: Any = guard(lambda: inner[0].as_bytes(), b"", d, "attachment_unreadable") \
                if isinstance(inner, list) and inner else b""
        else:
            data = guard(lambda: part.get_payload(decode=True), b"", d, "body_unreadable")
        if not isinstance(data, bytes):
            data = b""
        inline_text = ctype in ("text/plain", "text/html") and disposition != "attachment" \
            and filename is None
        if inline_text and ctype == "text/plain" and self.text is None:
            self.text, cut = cap_utf8(_decode_text(part, data, d), self.lim.max_text_bytes)
            if cut:
                d.add("text_truncated")
            return
        if inline_text and ctype == "text/html" and self.html is None:
            self.html, cut = cap_utf8(_decode_text(part, data, d), self.lim.max_html_bytes)
            if cut:
                d.add("html_truncated")
            return
        if len(self.attachments) >= self.lim.max_attachments:
            d.add("attachments_truncated")
            return
        if filename is not None:
            filename = cap_utf8(text_of(str(filename), d, "filename"), 255)[0]
        content: bytes | None = data
        if self.stored + len(data) > self.lim.max_attachment_bytes:
            d.add("attachment_content_dropped")
            content = None
        else:
            self.stored += len(data)
        self.attachments.append(ParsedAttachment(filename=filename, content_type=ctype[:255],
                                                 size=len(data), content=content))
