"""The error table (SPEC section 5) and the one exception hierarchy.

Every failure that reaches a caller is an ``ErrorBody``. Whether a code is retryable, its HTTP status and
its default fix are decided here and nowhere else::

    MailboxActorsError            root: carries an ErrorCode, a message, details
    |-- InvalidRequest            invalid_request   (bad envelope, bad id, unknown op/namespace)
    |-- LimitExceeded             limit_exceeded    (RT-7 storage limits, body caps)
    |-- Overloaded                overloaded        (RT-10; never retry at once)
    |-- DeadlineExceeded          timeout           (RPC-5)
    |-- PlatformError             a platform failure, typed once by its PlatformErrorKind; its
    |                             code is PLATFORM_CODES' (seed section 2), decided only there
    `-- ... any other code: raise MailboxActorsError(ErrorCode.X, "...")

A message never contains message content or clear-text addresses.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

__all__ = [
    "DeadlineExceeded",
    "ErrorBody",
    "ErrorCode",
    "InvalidRequest",
    "LimitExceeded",
    "MailboxActorsError",
    "Overloaded",
    "PLATFORM_CODES",
    "PlatformError",
    "PlatformErrorKind",
    "UnknownPath",
    "platform_code",
]


class ErrorCode(enum.StrEnum):
    """Every error code a caller can see, with its HTTP status, retryability and default fix."""

    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED_VERSION = "unsupported_version"
    LIMIT_EXCEEDED = "limit_exceeded"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    IDENTITY_NOT_FOUND = "identity_not_found"
    DOMAIN_NOT_FOUND = "domain_not_found"
    TENANT_NOT_FOUND = "tenant_not_found"
    EMAIL_NOT_FOUND = "email_not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONFLICT = "conflict"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RATE_LIMITED = "rate_limited"
    INTERNAL_ERROR = "internal_error"
    UPSTREAM_ERROR = "upstream_error"
    UNAVAILABLE = "unavailable"
    OVERLOADED = "overloaded"
    TIMEOUT = "timeout"

    @property
    def http_status(self) -> int:
        return _TABLE[self][0]

    @property
    def retryable(self) -> bool:
        return _TABLE[self][1]

    @property
    def default_fix(self) -> str:
        return _TABLE[self][2]


# code -> (HTTP status, retryable, default fix). The single place these are decided.
_TABLE: dict[ErrorCode, tuple[int, bool, str]] = {
    ErrorCode.INVALID_REQUEST: (
        400, False, "Correct the request: see details for the field that failed validation."),
    ErrorCode.UNSUPPORTED_VERSION: (
        400, False, "Send envelope version 1 (\"v\": 1)."),
    ErrorCode.LIMIT_EXCEEDED: (
        400, False, "Stay within the limit named in details; split the work or store less."),
    ErrorCode.UNAUTHENTICATED: (
        401, False, "Send 'Authorization: Bearer <token>' with the cluster token."),
    ErrorCode.PERMISSION_DENIED: (
        403, False, "Use the operator token for operator endpoints, the cluster token for RPC."),
    ErrorCode.IDENTITY_NOT_FOUND: (
        404, False, "Create the identity (init) first; an erased identity cannot be used again."),
    ErrorCode.DOMAIN_NOT_FOUND: (
        404, False, "Initialise the domain monitor (init) before using it."),
    ErrorCode.TENANT_NOT_FOUND: (
        404, False, "Initialise the tenant's object (init) before using it."),
    ErrorCode.EMAIL_NOT_FOUND: (
        404, False, "Check the id (details.field names it): no Email submitted to this identity "
                    "and no message received by it has it, or it was deleted."),
    ErrorCode.METHOD_NOT_ALLOWED: (
        405, False, "Use the method the endpoint documents (see /openapi.json)."),
    ErrorCode.CONFLICT: (
        409, False, "The record exists with different content or is in another state; "
                    "use a new id or read the current state."),
    ErrorCode.PAYLOAD_TOO_LARGE: (
        413, False, "Send a smaller body (the limit is in details)."),
    ErrorCode.RATE_LIMITED: (
        429, True, "Wait details.retry_after_ms before trying again."),
    ErrorCode.INTERNAL_ERROR: (
        500, True, "Retry later; if it persists, report the request_id to the operator."),
    ErrorCode.UPSTREAM_ERROR: (
        502, True, "The provider answered unexpectedly; retry with backoff."),
    ErrorCode.UNAVAILABLE: (
        503, True, "The node or actor cannot be reached now; retry with backoff."),
    ErrorCode.OVERLOADED: (
        503, False, "The actor's request queue is full; slow down, do not retry at once."),
    ErrorCode.TIMEOUT: (
        504, True, "The deadline passed; retry with a later deadline_ms."),
}
assert set(_TABLE) == set(ErrorCode), "every ErrorCode needs a row in _TABLE"


class ErrorBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The wire form of an error: ``{"err": ErrorBody}``."""

    code: ErrorCode
    message: str
    fix: str
    retryable: bool
    request_id: str | None = None
    details: dict[str, Any] | None = None


class MailboxActorsError(Exception):
    """Root of every error mailbox-actors raises on purpose; maps 1:1 to an ``ErrorBody``."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        fix: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details
        self.fix = fix
        self.request_id = request_id

    @property
    def retryable(self) -> bool:
        return self.code.retryable

    @property
    def http_status(self) -> int:
        """The HTTP status of the answer: the code's, from the table (SPEC 5)."""
        return self.code.http_status

    def to_body(self, request_id: str | None = None) -> ErrorBody:
        return ErrorBody(
            code=self.code,
            message=self.message,
            fix=self.fix or self.code.default_fix,
            retryable=self.code.retryable,
            request_id=request_id or self.request_id,
            details=self.details,
        )

    @classmethod
    def from_body(cls, body: ErrorBody) -> MailboxActorsError:
        return cls(body.code, body.message, details=body.details, fix=body.fix,
                   request_id=body.request_id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value!r}, {self.message!r})"


class InvalidRequest(MailboxActorsError):
    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message, details=details)


class UnknownPath(InvalidRequest):
    """A path no endpoint serves: RPC-7's HTTP 404, with SPEC 5's ``invalid_request`` in its body
    (the table has no code for a path); ``details`` name the path field and what is served."""

    def __init__(self, message: str, *, endpoints: list[str]) -> None:
        super().__init__(message, details={"field": "path", "endpoints": endpoints})

    @property
    def http_status(self) -> int:
        return 404


class LimitExceeded(MailboxActorsError):
    def __init__(self, limit: str, maximum: int, message: str) -> None:
        super().__init__(ErrorCode.LIMIT_EXCEEDED, message,
                         details={"limit": limit, "max": maximum})


class Overloaded(MailboxActorsError):
    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(ErrorCode.OVERLOADED, message, details=details)


class DeadlineExceeded(MailboxActorsError):
    def __init__(self, message: str = "the request's deadline_ms has passed") -> None:
        super().__init__(ErrorCode.TIMEOUT, message)


# ---- platform failures (seed section 2: PlatformError { kind, binding, detail }) ----------------


class PlatformErrorKind(enum.StrEnum):
    """What kind of failure a platform binding (a database, a file, a queue, a peer) had."""

    UNAVAILABLE = "unavailable"  # busy, locked, closed, disk full, a binding refusing: retry
    TIMEOUT = "timeout"          # an internal deadline passed
    UPSTREAM = "upstream"        # an outside API answered an unexpected status, synchronously
    NOT_FOUND = "not_found"      # an object the caller named (its own *_not_found), or internal
    CORRUPT = "corrupt"          # a file or row that is not what it must be
    INTERNAL = "internal"        # anything else the platform cannot go on from


# kind -> error code: the one place platform failures become codes (seed section 2's table). A
# NOT_FOUND for an object the caller named takes that object's own *_not_found instead.
PLATFORM_CODES: dict[PlatformErrorKind, ErrorCode] = {
    PlatformErrorKind.UNAVAILABLE: ErrorCode.UNAVAILABLE,
    PlatformErrorKind.TIMEOUT: ErrorCode.TIMEOUT,
    PlatformErrorKind.UPSTREAM: ErrorCode.UPSTREAM_ERROR,
    PlatformErrorKind.NOT_FOUND: ErrorCode.INTERNAL_ERROR,
    PlatformErrorKind.CORRUPT: ErrorCode.INTERNAL_ERROR,
    PlatformErrorKind.INTERNAL: ErrorCode.INTERNAL_ERROR,
}
assert set(PLATFORM_CODES) == set(PlatformErrorKind), "every kind needs a code"


def platform_code(kind: PlatformErrorKind, named: ErrorCode | None = None) -> ErrorCode:
    """The code of a platform failure: ``named`` (the caller's object's own ``*_not_found``)
    for a NOT_FOUND of an object the caller named, else the table's."""
    if kind is PlatformErrorKind.NOT_FOUND and named is not None:
        return named
    return PLATFORM_CODES[kind]


class PlatformError(MailboxActorsError):
    """A platform failure, typed by ``kind`` where it happens (``binding``: which one, e.g.
    ``control_db``, ``actor_storage``; ``detail``: a short machine string, never content or an
    address); its error code, status and retryability follow from the kind alone."""

    def __init__(self, kind: PlatformErrorKind, binding: str, detail: str, message: str, *,
                 named: ErrorCode | None = None, details: dict[str, Any] | None = None,
                 fix: str | None = None) -> None:
        super().__init__(platform_code(kind, named), message, details=details, fix=fix)
        self.kind = kind
        self.binding = binding
        self.detail = detail

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.kind.value!r}, {self.binding!r}, "
                f"{self.detail!r}: {self.message!r})")
