"""Wait filters (IN-4) as pure decisions: does a received message satisfy a registered wait?

Addresses compare as addr-specs without case; ``to`` looks at To, Cc and Delivered-To (the SMTP
door adds Delivered-To, so a Bcc recipient's wait matches); ``subject_contains`` is a substring
without case; ``header`` matches a field's name without case and its decoded value exactly (after
trimming); ``received_after_ms`` is strict.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from mailbox_actors.wire.inbound import WaitFilter

__all__ = ["WaitSubject", "wait_matches"]


class WaitSubject(msgspec.Struct, frozen=True):
    """What a wait filter reads of one received message."""

    from_addr: str
    recipients: Sequence[str]  # To, Cc, Delivered-To
    subject: str
    headers: Sequence[tuple[str, str]]
    received_at_ms: int


def wait_matches(f: WaitFilter, m: WaitSubject) -> bool:
    if f.received_after_ms is not None and m.received_at_ms <= f.received_after_ms:
        return False
    if f.from_ is not None and f.from_.strip().casefold() != m.from_addr.casefold():
        return False
    if f.to is not None:
        want = f.to.strip().casefold()
        if not any(r.casefold() == want for r in m.recipients):
            return False
    if f.subject_contains is not None and f.subject_contains.casefold() not in \
            m.subject.casefold():
        return False
    if f.header is not None:
        name, value = f.header.name.strip().casefold(), f.header.value.strip()
        if not any(n.casefold() == name and v.strip() == value for n, v in m.headers):
            return False
    return True
