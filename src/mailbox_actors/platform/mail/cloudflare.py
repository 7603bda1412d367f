"""``CloudflareTransport``: Cloudflare Email Service send semantics over HTTP (CA-5, CA-8).

One POST of the email as JSON to ``url`` with a bearer token. The body mirrors the ``send_email``
binding's message builder (``from``, ``to``, ``cc``, ``bcc``, ``subject``, ``text``, ``html``,
``headers``; the same names as the REST API's), with the stable Message-ID among the headers
(CA-12). The answer is Cloudflare's API envelope: ``{"success", "errors": [{"code", "message"}],
"result"}``. Success gives ``result.messageId`` (the binding's ``EmailSendResult``); a result
without one (the REST API's ``delivered``/``queued`` lists) falls back to the Message-ID, and its
``permanent_bounces`` become per-recipient refusals. Error codes are the binding's string codes,
decoded exactly as CA-5 lists them; anything else is ``outcome_unknown``, because some recipients
may already have been accepted. The HTTP client is injected (the node gives its own pool).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import msgspec

from mailbox_actors.platform.mail.transport import TransportClosed
from mailbox_actors.wire.transport import (
    EMAIL_ID_HEADER,
    OutboundEmail,
    OutcomeUnknown,
    ProviderAccepted,
    ProviderRejected,
    RecipientRefusal,
    RejectionClass,
    TransportOutcome,
    Unreachable,
)

__all__ = ["PERMANENT_CODES", "TEMPORARY_CODES", "CloudflareTransport", "HttpRequester",
           "code_class", "decode_answer"]

# CA-5: the codes that are a documented refusal of the whole request, by class.
TEMPORARY_CODES = frozenset({"E_RATE_LIMIT_EXCEEDED", "E_DAILY_LIMIT_EXCEEDED",
                             "E_INTERNAL_SERVER_ERROR"})
PERMANENT_CODES = frozenset({
    "E_VALIDATION_ERROR", "E_FIELD_MISSING", "E_TOO_MANY_RECIPIENTS", "E_TOO_MANY_ATTACHMENTS",
    "E_SENDER_NOT_VERIFIED", "E_RECIPIENT_NOT_ALLOWED", "E_RECIPIENT_SUPPRESSED",
    "E_SENDER_DOMAIN_NOT_AVAILABLE", "E_CONTENT_TOO_LARGE", "E_HEADER_NOT_ALLOWED",
    "E_HEADER_USE_API_FIELD", "E_HEADER_VALUE_INVALID", "E_HEADER_VALUE_TOO_LONG",
    "E_HEADER_NAME_INVALID", "E_HEADERS_TOO_LARGE", "E_HEADERS_TOO_MANY",
})
# A code is quoted in an outcome's reason only when it looks like one (never free text).
_CODE_SHAPE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_JSON = msgspec.json.Encoder()


class HttpRequester(Protocol):
    """What the transport needs of an HTTP client (``http.client.HttpPool`` is one). Failing to
    get an answer raises a ``ConnectionError`` whose ``request_sent`` says if it may have gone."""

    async def request(self, base_url: str, method: str, path: str,
                      headers: Mapping[str, str] | None, body: bytes,
                      timeout_s: float) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


def code_class(code: str) -> RejectionClass | None:
    """CA-5's class of a provider code; None: not a documented refusal (outcome unknown)."""
    if code in TEMPORARY_CODES:
        return "temporary"
    if code in PERMANENT_CODES:
        return "permanent"
    return None


class CloudflareTransport:
    """A ``Transport`` posting to an Email Service-style ``url`` with ``token`` as bearer."""

    def __init__(self, url: str, token: str, *, http: HttpRequester, timeout_s: float = 60.0,
                 owns_http: bool = True) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("url must be http:// or https://")
        self._base = f"{parts.scheme}://{parts.netloc}"
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = {"authorization": f"Bearer {token}", "content-type": "application/json",
                         "accept": "application/json"}
        self._http = http
        self._owns_http = owns_http
        self._timeout_s = timeout_s
        self._closed = False

    async def send(self, email: OutboundEmail) -> TransportOutcome:
        if self._closed:
            raise TransportClosed("CloudflareTransport.send after aclose")
        body = _JSON.encode(_request_body(email))
        try:
            status, answer = await self._http.request(self._base, "POST", self._path,
                                                      self._headers, body, self._timeout_s)
        except ConnectionError as e:
            if not getattr(e, "request_sent", True):  # nothing reached the provider (CA-16)
                return Unreachable(failure="connect_failed")
            return OutcomeUnknown(reason="no_response")
        except TimeoutError:
            return OutcomeUnknown(reason="no_response")
        return decode_answer(email, status, answer)

    async def aclose(self) -> None:
        self._closed = True
        if self._owns_http:
            await self._http.aclose()


def _request_body(email: OutboundEmail) -> dict[str, Any]:
    headers = {k: v for k, v in email.headers.items() if k.lower() != "message-id"}
    headers["Message-ID"] = email.message_id_header
    headers[EMAIL_ID_HEADER] = email.email_id  # CA-17: named by its journal copy
    body: dict[str, Any] = {"from": email.from_, "to": email.to, "subject": email.subject,
                            "headers": headers}
    for name, value in (("cc", email.cc), ("bcc", email.bcc), ("text", email.text),
                        ("html", email.html)):
        if value:
            body[name] = value
    return body


def decode_answer(email: OutboundEmail, status: int, answer: bytes) -> TransportOutcome:
    """The outcome of one HTTP answer (hostile input: any shape is decoded without raising)."""
    try:
        doc: Any = msgspec.json.decode(answer) if answer else None
    except (msgspec.DecodeError, RecursionError):  # RecursionError: JSON nested past the limit
        doc = None
    if not isinstance(doc, dict):
        doc = {}
    success = doc.get("success")
    if 200 <= status < 300 and success is not False:
        result = doc.get("result")
        result = result if isinstance(result, dict) else {}
        provider_id = result.get("messageId") or result.get("message_id") or doc.get("messageId")
        if not isinstance(provider_id, str) or not provider_id or len(provider_id) > 256:
            provider_id = email.message_id_header
        return ProviderAccepted(provider_message_id=provider_id,
                                refused=_bounced(email, result.get("permanent_bounces")))
    code = _first_code(doc)
    if code is None:
        return OutcomeUnknown(reason="no_error_code")
    klass = code_class(code)
    if klass is None:  # E_DELIVERY_FAILED, an undocumented or a numeric code
        shown = code if _CODE_SHAPE.match(code) else "undocumented"
        return OutcomeUnknown(reason=f"provider_code:{shown}")
    return ProviderRejected(code=code, klass=klass)


def _first_code(doc: dict[str, Any]) -> str | None:
    """The first error's code: ``errors[].code`` (the API envelope), else ``error.code`` or a
    bare ``code`` (a binding's thrown error, serialized)."""
    candidates: list[Any] = []
    errors = doc.get("errors")
    if isinstance(errors, list):
        candidates.extend(e.get("code") for e in errors[:64] if isinstance(e, dict))
    error = doc.get("error")
    if isinstance(error, dict):
        candidates.append(error.get("code"))
    candidates.append(doc.get("code"))
    for code in candidates:
        if isinstance(code, bool):
            continue
        if isinstance(code, int):
            return str(code)
        if isinstance(code, str) and code:
            return code[:128]
    return None


def _bounced(email: OutboundEmail, bounces: Any) -> list[RecipientRefusal]:
    if not isinstance(bounces, list):
        return []
    wanted = {b.strip().lower() for b in bounces[:256] if isinstance(b, str)}
    return [RecipientRefusal(i, "permanent_bounce", "permanent")
            for i, address in enumerate(email.recipients) if address.strip().lower() in wanted]
