"""Where a webhook goes and what it carries, checked before any attempt (Q-4): the queued job
decoded, the endpoint URL made into the pool's base URL and request target, and how https
endpoints are verified. Anything that can never succeed is ``Refused`` (dead-lettered at once)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec

from mailbox_actors.wire.events import WebhookMessage

__all__ = ["Refused", "decode_job", "target_of", "tls_context"]

_PATH_SAFE = "/?=&%:@!$'()*+,;~-._[]"
_PORTS = {"http": 80, "https": 443}


class Refused(Exception):
    """A delivery that can never succeed as it stands: dead-lettered at once with this reason."""


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """How https endpoints are verified: the system's trusted CAs, or only those of ``ca_file``
    (a PEM bundle: a private CA, or a test's). Certificates and host names are always checked."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"webhook CA file {ca_file!r} cannot be loaded: {e}") from None


def decode_job(body: Mapping[str, Any]) -> WebhookMessage:
    try:
        job = msgspec.convert(body, WebhookMessage)
    except msgspec.ValidationError as exc:
        raise Refused(f"invalid body: {exc}") from None  # names the field, never its value
    if job.v != 1 or job.kind != "webhook_event":
        raise Refused("invalid body: not a v1 webhook_event")
    if job.event.tenant_id != job.tenant_id:
        raise Refused("invalid body: the event belongs to another tenant")
    return job


# webhook_url -> its (base_url, request target): a tenant's URL is parsed at its first delivery,
# not at every one (urlsplit, port and quoting were a tenth of a delivery's own work).
_TARGETS: dict[str, tuple[str, str]] = {}
_TARGETS_KEPT = 4096


def target_of(url: str) -> tuple[str, str]:
    """``(base_url, request target)`` for the pool; ``Refused`` for a URL that can never work."""
    found = _TARGETS.get(url)
    if found is None:
        found = _parse_target(url)
        if len(_TARGETS) >= _TARGETS_KEPT:
            _TARGETS.clear()
        _TARGETS[url] = found
    return found


def _parse_target(url: str) -> tuple[str, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("webhook_url is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("webhook_url is not an http:// or https:// URL with a host")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    target = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_PATH_SAFE)
    return f"{parts.scheme}://{host}:{port or _PORTS[parts.scheme]}", target
