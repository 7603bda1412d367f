"""The replay digest (CA-2): what a repeated source id is compared by, after content is dropped.

It covers the content, the envelope, the headers and the expiry, canonically: header names are
compared case-insensitively and in any order; recipient lists keep their order (it is each
Message's position). The digest is all a terminal receipt keeps of its content.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import msgspec

__all__ = ["content_digest"]

_ENC = msgspec.json.Encoder(order="sorted")


def content_digest(*, from_: str, to: Sequence[str], cc: Sequence[str], bcc: Sequence[str],
                   subject: str, text: str | None, html: str | None,
                   headers: Mapping[str, str], send_before: int | None) -> str:
    """SHA-256 (hex) over a canonical encoding of everything replay must compare."""
    canonical = {
        "v": 1, "from": from_, "to": list(to), "cc": list(cc), "bcc": list(bcc),
        "subject": subject, "text": text, "html": html,
        "headers": sorted((k.lower(), v) for k, v in headers.items()),
        "send_before": send_before,
    }
    return hashlib.sha256(_ENC.encode(canonical)).hexdigest()
