"""What the control database accepts (Q-3): names, retention, webhook URLs and secrets, object ids and
domain names, checked before anything is written. Errors name the field, never a secret's value."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from mailbox_actors.wire.domain import DOMAIN_PATTERN
from mailbox_actors.wire.errors import InvalidRequest

__all__ = ["check_events_days", "check_object_id", "check_text", "check_webhook",
           "normalise_domain"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_DOMAIN = re.compile(DOMAIN_PATTERN)  # the one DomainMonitor's init accepts
_MIN_SECRET, _MAX_SECRET, _MAX_URL = 16, 1024, 2048


def check_text(field: str, value: object, max_len: int) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= max_len or not value.strip():
        raise InvalidRequest(f"{field} must be 1 to {max_len} characters, not all blank",
                             details={"field": field, "max_length": max_len})
    if _CONTROL_CHARS.search(value):
        raise InvalidRequest(f"{field} must not contain control characters", details={"field": field})


def check_events_days(days: object) -> None:
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise InvalidRequest("events_days must be an integer from 1 to 3650",
                             details={"field": "events_days", "min": 1, "max": 3650})


def check_webhook(url: str | None, secret: str | None) -> None:
    """The URL (when given) must be http(s) with a host; the secret then at least 16 characters."""
    if url is None:
        if secret is not None:
            raise InvalidRequest("webhook_secret was given without a webhook_url",
                                 details={"field": "webhook_secret"})
        return
    if not isinstance(url, str) or len(url) > _MAX_URL or _CONTROL_CHARS.search(url) or " " in url:
        raise InvalidRequest(f"webhook_url must be a URL of at most {_MAX_URL} characters without "
                             "spaces or control characters", details={"field": "webhook_url"})
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018  (raises ValueError when the port is not a number in range)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidRequest("webhook_url must be an http:// or https:// URL with a host",
                             details={"field": "webhook_url"})
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest("webhook_url must not carry credentials; the secret signs each delivery",
                             details={"field": "webhook_url"})
    if not isinstance(secret, str) or not _MIN_SECRET <= len(secret) <= _MAX_SECRET:
        raise InvalidRequest(f"webhook_secret must be {_MIN_SECRET} to {_MAX_SECRET} characters "
                             "when webhook_url is set",
                             details={"field": "webhook_secret", "min_length": _MIN_SECRET})


def check_object_id(field: str, value: object) -> None:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise InvalidRequest(f"{field} must be 64 lowercase hex digits", details={"field": field})


def normalise_domain(name: object) -> str:
    if isinstance(name, str):
        lowered = name.lower().removesuffix(".")
        if _DOMAIN.fullmatch(lowered):
            return lowered
    raise InvalidRequest("name must be a domain name such as example.com", details={"field": "name"})
