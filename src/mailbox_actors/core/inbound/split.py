"""Splitting a plain message without the feed parser (IN-1): most mail is one part under a block
of well-formed header lines, and for that the standard library's line-by-line feed parser is
most of the cost of a parse.

``split_fields`` answers the header items the feed parser would read (name and raw value, in
order) and the body's bytes when the message is certainly simple, and None otherwise, leaving
the message to the feed parser: anything it would read
differently or record a defect for (a line that is not a header, a continuation first, a
``From `` line, a lone CR, no blank line after the headers) and any message that could hold
parts (a multipart or ``message/`` type named anywhere in the headers). Equivalence with the
feed parser is tested over the hostile corpus. ``split_simple`` (and ``as_message`` of a split)
is the same split as the ``compat32`` ``Message`` the feed parser would build (the same raw
header items, the body as its payload, no defects); a plain-text body is read from the split
itself (``mime.Body.plain``), so most mail never builds one.
"""

from __future__ import annotations

import re
from email import policy
from email.message import Message

__all__ = ["Split", "as_message", "split_fields", "split_simple"]

# A header field as the feed parser reads one: a name of printable ASCII other than ':' (at least
# one character), ':', the rest of its line, and the continuation lines (a space or tab first)
# that follow; every line ends in LF (CRLF here: a lone CR sends the message to the feed parser).
_FIELD = re.compile(r"([\x21-\x39\x3b-\x7e]+):([^\r\n]*\r?\n(?:[ \t][^\r\n]*\r?\n)*)")
_BLANK = re.compile(rb"\n\r?\n")  # the end of the header block: a line end, then an empty line


# The header items (name, raw value as compat32 keeps it) and the body's bytes.
Split = tuple[list[tuple[str, str]], bytes]


def split_simple(raw: bytes) -> Message | None:
    """The message as the feed parser would build it, or None when it might read it otherwise."""
    split = split_fields(raw)
    return None if split is None else as_message(split)


def as_message(split: Split) -> Message:
    """The ``compat32`` ``Message`` the feed parser builds of a message ``split_fields`` split
    (the bytes parser hands the feed parser the text decoded so: 8-bit bytes as surrogates)."""
    msg = Message(policy=policy.compat32)
    for name, value in split[0]:
        msg.set_raw(name, value)
    msg.set_payload(split[1].decode("ascii", "surrogateescape"))
    return msg


def split_fields(raw: bytes) -> Split | None:
    """The header items and body of a message the feed parser would read as ``as_message``
    builds it, or None when it might read it otherwise."""
    end = _BLANK.search(raw)
    if end is None:
        return None
    block = raw[:end.start() + 1]  # the header lines, each with its line end
    lowered = block.lower()
    if block.count(b"\r") != block.count(b"\r\n") or b"multipart/" in lowered \
            or b"message/" in lowered or block.startswith(b"From "):
        return None  # a lone CR, a type that could hold parts, a unix From line: the feed parser
    # The bytes parser hands the feed parser the text decoded so (8-bit bytes as surrogates).
    text = block.decode("ascii", "surrogateescape")
    items: list[tuple[str, str]] = []
    match = _FIELD.match
    pos, size = 0, len(text)
    while pos < size:
        field = match(text, pos)
        if field is None:
            # Not a header line (the feed parser ends the headers there, with a defect), or a
            # continuation first (a defect too).
            return None
        # compat32's header_source_parse: the first line's blanks after ':' and the last line
        # end go; continuation lines are kept as they are.
        items.append((field[1], field[2].lstrip(" \t").rstrip("\r\n")))
        pos = field.end()
    return items, raw[end.end():]
