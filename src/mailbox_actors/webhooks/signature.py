"""Webhook signatures (Q-4): the headers a delivery carries and how a receiver checks them.

``x-mailbox-actors-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>``; the
timestamp bounds replays, several ``v1=`` values allow a secret to be rotated. Receivers copy
``verify`` (or ``examples/webhook_receiver.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import re

__all__ = ["ATTEMPT_HEADER", "EVENT_ID_HEADER", "EVENT_TYPE_HEADER", "REQUEST_ID_HEADER",
           "SIGNATURE_HEADER", "sign", "verify"]

SIGNATURE_HEADER = "x-mailbox-actors-signature"
EVENT_ID_HEADER = "x-mailbox-actors-event-id"
EVENT_TYPE_HEADER = "x-mailbox-actors-event-type"
ATTEMPT_HEADER = "x-mailbox-actors-delivery-attempt"
REQUEST_ID_HEADER = "x-mailbox-actors-request-id"  # the delivery's req_ id, as in its log lines
_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


def sign(secret: str, timestamp_s: int, body: bytes) -> str:
    """The signature header's value: ``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "t." + body)>``."""
    mac = hmac.new(secret.encode(), f"{timestamp_s}.".encode() + body, hashlib.sha256)
    return f"t={timestamp_s},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, *, now_s: int, tolerance_s: int = 300) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within ``tolerance_s`` of ``now_s``.

    Several ``v1=`` values may be present (a secret being rotated); any one matching is enough.
    """
    timestamp: int | None = None
    candidates: list[bytes] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif key == "v1" and _HEX_SHA256.fullmatch(value):
            candidates.append(value.encode())
    if timestamp is None or not candidates or abs(now_s - timestamp) > tolerance_s:
        return False
    expected = sign(secret, timestamp, body).rpartition("v1=")[2].encode()
    # Compare against every candidate, so the time taken does not say which one matched.
    return sum(hmac.compare_digest(expected, c) for c in candidates) > 0
