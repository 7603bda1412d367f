"""Splitting a plain message without the feed parser (IN-1): most mail is one part under a block
of well-formed header lines, and for that the standard library's line-by-line feed parser is
most of the cost of a parse.

``split_simple`` builds the same ``compat32`` ``Message`` the feed parser would (the same raw
header items, the body as its payload, no defects) when the message is certainly simple, and
answers None otherwise, leaving the message to the feed parser: anything it would read
differently or record a defect for (a line that is not a header, a continuation first, a
``From `` line, a lone CR, no blank line after the headers) and any message that could hold
parts (a multipart or ``message/`` type named anywhere in the headers). Equivalence with the
feed parser is tested over the hostile corpus.
"""

from __future__ import annotations

import re
from email import policy
from email.message import Message

__all__ = ["split_simple"]

# A header line as the feed parser's headerRE reads one: a field name of printable ASCII other
# than ':' (at least one character), then ':'.
_FIELD = re.compile(rb"[\041-\071\073-\176]+:")
_BLANK = re.compile(rb"\n\r?\n")  # the end of the header block: a line end, then an empty line
_PARTS = re.compile(rb"(?i)multipart/|message/")


def split_simple(raw: bytes) -> Message | None:
    """The message as the feed parser would build it, or None when it might read it otherwise."""
    end = _BLANK.search(raw)
    if end is None:
        return None
    block = raw[:end.start() + 1]  # the header lines, each with its line end
    body = raw[end.end():]
    if block.count(b"\r") != block.count(b"\r\n") or _PARTS.search(block) \
            or block.startswith(b"From "):
        return None
    msg = Message(policy=policy.compat32)
    name: bytes | None = None
    lines: list[bytes] = []
    for line in block.splitlines(keepends=True):
        if line[:1] in (b" ", b"\t"):
            if name is None:
                return None  # a continuation first: the feed parser records a defect
            lines.append(line)
            continue
        field = _FIELD.match(line)
        if field is None:
            return None  # not a header line: the feed parser ends the headers there (a defect)
        if name is not None:
            _set(msg, lines)
        name, lines = line[:field.end() - 1], [line]
    if name is None:
        return None
    _set(msg, lines)
    msg.set_payload(body.decode("ascii", "surrogateescape"))
    return msg


def _set(msg: Message, lines: list[bytes]) -> None:
    # compat32's header_source_parse, on the text the bytes parser would hand it.
    first, _, rest = b"".join(lines).decode("ascii", "surrogateescape").partition(":")
    msg.set_raw(first, rest.lstrip(" \t").rstrip("\r\n"))
