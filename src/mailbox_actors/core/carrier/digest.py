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

# The canonical form is the JSON of a mapping with its keys sorted; the mapping below is built in
# that order, so a plain encoder writes the same bytes as one that sorts (a stored digest must
# keep matching its replays across versions: the test pins two).
_ENC = msgspec.json.Encoder()


def content_digest(*, from_: str, to: Sequence[str], cc: Sequence[str], bcc: Sequence[str],
                   subject: str, text: str | None, html: str | None,
                   headers: Mapping[str, str], send_before: int | None) -> str:
    """SHA-256 (hex) over a canonical encoding of everything replay must compare."""
    canonical = {
        "bcc": list(bcc), "cc": list(cc), "from": from_,
        "headers": sorted((k.lower(), v) for k, v in headers.items()) if headers else [],
        "html": html, "send_before": send_before, "subject": subject, "text": text,
        "to": list(to), "v": 1,
    }
    return hashlib.sha256(_ENC.encode(canonical)).hexdigest()
