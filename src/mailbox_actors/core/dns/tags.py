"""Tag-value lists (RFC 6376 3.2, used by DKIM key records and DMARC records), read leniently.

Junk is tolerated the way receivers tolerate it: empty segments, stray whitespace, a trailing
semicolon, tags without ``=``, unknown tags. The first occurrence of a tag wins.
"""

from __future__ import annotations

__all__ = ["parse_tags"]


def parse_tags(record: str) -> dict[str, str]:
    tags: dict[str, str] = {}
    for part in record.split(";"):
        name, eq, value = part.partition("=")
        name = name.strip().lower()
        if not eq or not name:
            continue
        tags.setdefault(name, value.strip())
    return tags
