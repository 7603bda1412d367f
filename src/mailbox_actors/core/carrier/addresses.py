"""Addresses and headers an Email may carry (CA-1, CA-5, CA-6): pure checks, no I/O.

``check_addr_spec`` accepts an RFC 5322 addr-spec (dot-atom or quoted local part, dot-atom or
literal domain; UTF-8 in atoms as RFC 6532 allows) within RFC 5321's lengths, and nothing else: no
display names, no comments, no CR, LF or NUL. ``normalize`` is the cap's key (trimmed,
lower-cased). ``header_problem`` applies the Cloudflare-style send's header rules, so a header the
provider would refuse is refused at submit, naming its CA-5 code.
"""

from __future__ import annotations

import re

__all__ = ["API_FIELD_HEADERS", "MAX_HEADERS", "MAX_HEADERS_BYTES", "MAX_HEADER_VALUE",
           "PLATFORM_HEADERS", "WHITELISTED_HEADERS", "address_problem", "header_problem",
           "headers_problem", "normalize", "text_problem"]

# RFC 5322 atext and qtext, each with every non-ASCII code point (RFC 6532). Spelt as ranges up to
# U+10FFFF they cost every process importing this module ~12 ms to compile, so the pattern for any
# value is spelt by what the classes exclude (the same sets: a test compares them on every code
# point), and an ASCII value, the common case, meets an ASCII-only pattern that also matches faster.
_ATEXT_ASCII = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]"
_QTEXT_ASCII = r"[\x20\x21\x23-\x5b\x5d-\x7e]"
_ATEXT = r'[^\x00-\x20"(),.:;<>@\[\\\]\x7f]'
_QTEXT = r'[^\x00-\x1f"\\\x7f]'
_LITERAL = r"\[[\x21-\x5a\x5e-\x7e]*\]"


def _addr_spec(atext: str, qtext: str) -> re.Pattern[str]:
    dot_atom = rf"{atext}+(?:\.{atext}+)*"
    quoted = rf'"(?:{qtext}|\\[\x20-\x7e])*"'
    return re.compile(rf"(?:{dot_atom}|{quoted})@(?:{dot_atom}|{_LITERAL})")


_ADDR_SPEC = _addr_spec(_ATEXT, _QTEXT)
_ASCII_ADDR_SPEC = _addr_spec(_ATEXT_ASCII, _QTEXT_ASCII)
MAX_LOCAL = 64
MAX_ADDRESS = 254


def address_problem(value: str) -> str | None:
    """None for an addr-spec; else why not (never quoting the value)."""
    # The common case first: a match has no CR, LF or NUL (no part of the pattern admits them),
    # and an ASCII value's length is its byte length.
    if value.isascii() and len(value) <= MAX_ADDRESS and _ASCII_ADDR_SPEC.fullmatch(value):
        if len(value.rsplit("@", 1)[0]) <= MAX_LOCAL:
            return None
        return f"has a local part longer than {MAX_LOCAL} bytes"
    if not value:
        return "is empty"
    if any(c in value for c in "\r\n\0"):
        return "contains CR, LF or NUL"
    if len(value.encode()) > MAX_ADDRESS:
        return f"is longer than {MAX_ADDRESS} bytes"
    if not _ADDR_SPEC.fullmatch(value):
        return "is not an RFC 5322 addr-spec (local part, at sign, domain; no display name)"
    local = value.rsplit("@", 1)[0]
    if len(local.encode()) > MAX_LOCAL:
        return f"has a local part longer than {MAX_LOCAL} bytes"
    return None


def normalize(address: str) -> str:
    """The per-recipient cap's key (CA-6): trimmed and lower-cased."""
    return address.strip().lower()


def text_problem(value: str) -> str | None:
    """A subject or header value: one line, so no header can be injected."""
    if "\r" in value or "\n" in value:
        return "contains CR or LF (header injection)"
    if "\0" in value:
        return "contains NUL"
    return None


# The Cloudflare-style send's rules (CA-5's header codes): the platform sets these itself ...
PLATFORM_HEADERS = frozenset({
    "date", "message-id", "mime-version", "content-type", "content-transfer-encoding",
    "dkim-signature", "return-path", "received", "feedback-id", "tls-required",
    "tls-report-domain", "tls-report-submitter", "cfbl-address", "cfbl-feedback-id"})
# ... these are fields of the request, not headers ...
API_FIELD_HEADERS = frozenset({"from", "to", "cc", "bcc", "subject", "reply-to"})
# ... and besides X-*, only these may be set.
WHITELISTED_HEADERS = frozenset({
    "in-reply-to", "references", "list-unsubscribe", "list-unsubscribe-post", "list-id",
    "list-archive", "list-help", "list-owner", "list-post", "list-subscribe", "auto-submitted",
    "precedence", "keywords", "comments", "importance", "priority", "sensitivity",
    "organization", "content-language", "thread-topic", "thread-index"})
MAX_HEADERS = 20
MAX_HEADER_VALUE = 998  # RFC 5322's line length
MAX_HEADERS_BYTES = 16 * 1024
_FIELD_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]{1,76}")


def header_problem(name: str, value: str) -> tuple[str, str] | None:
    """None when the header may be sent; else (CA-5 code, why)."""
    if not _FIELD_NAME.fullmatch(name):
        return "E_HEADER_NAME_INVALID", "is not an RFC 5322 field name (printable ASCII, no ':')"
    low = name.lower()
    if low in API_FIELD_HEADERS:
        return "E_HEADER_USE_API_FIELD", "is a field of the request; set it there"
    if low in PLATFORM_HEADERS or low.startswith("arc-"):
        return "E_HEADER_NOT_ALLOWED", "is set by the platform"
    if low not in WHITELISTED_HEADERS and not low.startswith("x-"):
        return "E_HEADER_NOT_ALLOWED", "is not a header the provider accepts (use X-...)"
    bad = text_problem(value)
    if bad is not None:
        return "E_HEADER_VALUE_INVALID", bad
    if len(value) > MAX_HEADER_VALUE:
        return "E_HEADER_VALUE_TOO_LONG", f"is longer than {MAX_HEADER_VALUE} characters"
    return None


def headers_problem(headers: dict[str, str]) -> tuple[str, str] | None:
    """The whole set's limits: how many, how large, and no name given twice (case-insensitive)."""
    if len(headers) > MAX_HEADERS:
        return "E_HEADERS_TOO_MANY", f"more than {MAX_HEADERS} headers"
    if sum(len(k.encode()) + len(v.encode()) + 4 for k, v in headers.items()) > MAX_HEADERS_BYTES:
        return "E_HEADERS_TOO_LARGE", f"headers over {MAX_HEADERS_BYTES} bytes"
    if len({k.lower() for k in headers}) != len(headers):
        return "E_HEADER_NAME_INVALID", "a header name is given twice"
    return None
