"""The caps inbound mail is stored under (IN-1): settings, with the defaults of the design."""

from __future__ import annotations

import msgspec

__all__ = ["InboundLimits"]

_KIB = 1024
_MIB = 1024 * 1024


class InboundLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every cap of ``ingest``. Over ``max_message_bytes`` a message is refused
    (``limit_exceeded``; 552 at the SMTP door); over any other cap it is stored cut, with a defect
    naming what was cut."""

    max_message_bytes: int = 25 * _MIB
    max_headers: int = 1_000  # header fields kept, in order
    max_header_value_bytes: int = 64 * _KIB  # one field's value
    max_header_bytes: int = 512 * _KIB  # all kept fields together
    max_text_bytes: int = 1 * _MIB  # the text/plain body, UTF-8
    max_html_bytes: int = 1 * _MIB  # the text/html body, UTF-8
    max_attachments: int = 250  # listed per message
    max_attachment_bytes: int = 10 * _MIB  # attachments' content stored per message
    max_mime_parts: int = 1_000
    max_mime_depth: int = 50

    def check(self) -> str | None:
        """The name of the first cap that is not positive, or None."""
        for name in self.__struct_fields__:
            if getattr(self, name) < 1:
                return name
        return None
