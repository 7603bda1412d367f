"""Lenient parsing of one RFC 5322 message under caps (IN-1), with the standard library.

Nothing here raises on what a sender wrote: the message is split with ``compat32`` (which never
parses a header while splitting), and every header is then read on its own inside a ``try``,
because the modern policy raises on some malformed headers only when they are read (cpython
#105802). What could not be read, or was cut to fit a cap, becomes a defect (a short string with
no content in it). The one refusal is a message over ``max_message_bytes``, decided by the caller.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import re
from collections.abc import Iterable
from email import policy
from email.message import Message
from email.parser import BytesParser

import msgspec

from mailbox_actors.core.inbound.dates import date_ms
from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.core.inbound.mime import Body, ParsedAttachment
from mailbox_actors.core.inbound.split import as_message, split_fields
from mailbox_actors.core.inbound.text import Defects, cap_utf8, text_of
from mailbox_actors.core.inbound.threads import MAX_ID_CHARS, msg_ids

__all__ = ["ParsedAttachment", "ParsedMessage", "parse_message"]

_FOLD = re.compile(r"\r?\n[ \t]*")
# One address, bare or after a plain display name: nothing a parser would read differently.
_SIMPLE_ADDRESS = re.compile(r'\s*(?:[\w .\-]*<)?([\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+)>?\s*\Z')
_UNFOLD = re.compile(r"\r?\n(?=[ \t])|\r?\n$")
_NAME_OK = re.compile(r"[^A-Za-z0-9-]")
# More multipart containers than this cannot be a real message; the parser recurses per level
# (1,000 levels is a RecursionError after half a second), so such a body is not split at all.
_MULTIPART = re.compile(rb"(?im)^content-type:[ \t]*multipart/")
_MAX_MULTIPART_SCAN = 200


class ParsedMessage(msgspec.Struct, frozen=True):
    headers: list[tuple[str, str]]  # decoded values, unfolded, in order, under the header caps
    message_id: str | None  # without brackets; None when absent or not a Message-ID
    in_reply_to: str | None  # the raw (decoded) values, for threading
    references: str | None
    thread_index_root: str | None  # "ti:" + base64 of the first 22 bytes of Thread-Index
    subject: str
    from_addr: str
    to: list[str]
    cc: list[str]
    delivered_to: list[str]
    date_ms: int | None
    text: str | None
    html: str | None
    attachments: list[ParsedAttachment]
    defects: list[str]


def _safe_name(name: str) -> str:
    return _NAME_OK.sub("_", name.lower())[:64] or "_"


def _read_header(name: str, raw: str, d: Defects) -> str:
    """One header value, decoded (encoded-words) and unfolded; never raises."""
    if raw.isascii() and "\0" not in raw:
        value = raw  # the common case: nothing for text_of to do
    else:
        value = text_of(raw, d, _safe_name(name))
    if "=?" not in value:
        # Nothing to decode: unfolding is all the modern parser would do, at a fraction of its
        # cost (its header registry takes about half a millisecond per field).
        return (_UNFOLD.sub("", value) if "\n" in value else value).strip()
    try:
        return str(policy.default.header_fetch_parse(name, value))
    except Exception:  # the modern parser's IndexError, AttributeError...: read it plainly
        d.add(f"header_unreadable:{_safe_name(name)}")
        return _FOLD.sub(" ", value).strip()


def _headers(items: Iterable[tuple[str, str]], lim: InboundLimits, d: Defects
             ) -> list[tuple[str, str]]:
    """The raw header items (compat32's ``raw_items``) decoded, under the caps."""
    out: list[tuple[str, str]] = []
    total = 0
    cap = lim.max_header_value_bytes
    for i, (name, raw) in enumerate(items):
        if i >= lim.max_headers:
            d.add("headers_truncated")
            break
        if len(raw) > cap:  # cut before decoding: a 1 MB line is cheap
            raw = raw[:cap]
            d.add(f"header_value_truncated:{_safe_name(name)}")
        value = _read_header(name, raw, d)
        if value.isascii():  # one byte a character: no encoding to measure or cut
            size = len(value)
            if size > cap:
                value, size = value[:cap], cap
                d.add(f"header_value_truncated:{_safe_name(name)}")
        else:
            value, cut = cap_utf8(value, cap)
            if cut:
                d.add(f"header_value_truncated:{_safe_name(name)}")
            size = len(value.encode("utf-8", "surrogatepass"))
        if not (name.isascii() and "\0" not in name):
            name = text_of(name, d, "name")
        name = name[:256]
        total += len(name) + size + 4
        if total > lim.max_header_bytes:
            d.add("headers_truncated")
            break
        out.append((name, value))
    return out


def _by_name(headers: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Every value of each field, by the field's lower-case name, in order (one pass)."""
    out: dict[str, list[str]] = {}
    for n, v in headers:
        out.setdefault(n.lower(), []).append(v)
    return out


def _first(by_name: dict[str, list[str]], low: str) -> str | None:
    values = by_name.get(low)
    return values[0] if values else None


def _addresses(by_name: dict[str, list[str]], low: str, d: Defects) -> list[str]:
    values = by_name.get(low)
    if not values:
        return []
    if len(values) == 1 and (simple := _SIMPLE_ADDRESS.match(values[0])):
        return [simple.group(1)]  # the common "Name <a@b>" or "a@b": no parser needed
    try:
        pairs = email.utils.getaddresses(values)
    except Exception:
        d.add(f"address_unreadable:{low}")
        return []
    out = [a for _, a in pairs if "@" in a]
    if len(out) < sum(1 for v in values if v.strip()) and not out:
        d.add(f"address_unreadable:{low}")
    return out[:1000]


def _message_id(value: str | None, d: Defects) -> str | None:
    if value is None:
        return None
    ids = msg_ids(value)
    if not ids or len(ids[0]) > MAX_ID_CHARS or "@" not in ids[0]:
        d.add("message_id_invalid")
        return None
    return ids[0]


def _thread_index_root(value: str | None, d: Defects) -> str | None:
    if value is None:
        return None
    try:
        raw = base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        d.add("thread_index_invalid")
        return None
    if len(raw) < 22:
        d.add("thread_index_invalid")
        return None
    return "ti:" + base64.b64encode(raw[:22]).decode()


def parse_message(raw: bytes, lim: InboundLimits) -> ParsedMessage:
    """Parse ``raw`` (already within ``max_message_bytes``); never raises on its content."""
    d = Defects()
    if b"\0" in raw:
        d.add("nul_bytes")
    containers = 0
    # The scan's regex (case-insensitive, per line) costs more than the rest of a plain parse;
    # a message that names no multipart type anywhere has none to count.
    if b"multipart/" in raw.lower():
        for _ in _MULTIPART.finditer(raw):
            containers += 1
            if containers > _MAX_MULTIPART_SCAN:
                break
    split_body = containers <= _MAX_MULTIPART_SCAN
    if not split_body:
        d.add("mime_too_complex")
    simple = split_fields(raw) if containers == 0 else None  # most mail: one part
    msg: Message | None = None
    items: Iterable[tuple[str, str]]
    if simple is not None:
        items = simple[0]
    else:
        try:
            msg = BytesParser(policy=policy.compat32).parsebytes(raw,
                                                                 headersonly=not split_body)
        except RecursionError:
            d.add("mime_too_complex")
            msg = BytesParser(policy=policy.compat32).parsebytes(raw, headersonly=True)
            split_body = False
        items = msg.raw_items()
    headers = _headers(items, lim, d)
    body = Body(lim, d)
    if split_body:
        # A plain-text body is read from the split; any other part builds the message to walk.
        if simple is not None and not body.plain(simple):
            msg = as_message(simple)
        if msg is not None:
            body.walk(msg)
    else:
        assert msg is not None  # only the feed parser reads a message with too many containers
        payload = msg.get_payload()
        data = payload.encode("ascii", "surrogateescape") if isinstance(payload, str) else b""
        body.text, cut = cap_utf8(data.decode("utf-8", "replace").replace("\0", "\ufffd"),
                                   lim.max_text_bytes)
        if cut:
            d.add("text_truncated")
    by_name = _by_name(headers)
    from_addrs = _addresses(by_name, "from", d)
    if _first(by_name, "from") is None:
        d.add("from_missing")
    return ParsedMessage(
        headers=headers,
        message_id=_message_id(_first(by_name, "message-id"), d),
        in_reply_to=_first(by_name, "in-reply-to"),
        references=_first(by_name, "references"),
        thread_index_root=_thread_index_root(_first(by_name, "thread-index"), d),
        subject=_first(by_name, "subject") or "",
        from_addr=from_addrs[0] if from_addrs else "",
        to=_addresses(by_name, "to", d), cc=_addresses(by_name, "cc", d),
        delivered_to=_addresses(by_name, "delivered-to", d),
        date_ms=date_ms(_first(by_name, "date"), d),
        text=body.text, html=body.html, attachments=body.attachments,
        defects=list(d.items))
