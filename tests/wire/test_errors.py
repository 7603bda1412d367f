"""The error table of SPEC section 5 (ERR) and the wire form of errors."""

from __future__ import annotations

import msgspec
import pytest

from mailbox_actors.wire.errors import (
    DeadlineExceeded,
    ErrorBody,
    ErrorCode,
    InvalidRequest,
    LimitExceeded,
    MailboxActorsError,
    Overloaded,
)

# SPEC section 5, transcribed: code -> (HTTP status, retryable).
SPEC_TABLE: dict[str, tuple[int, bool]] = {
    "invalid_request": (400, False),
    "unsupported_version": (400, False),
    "limit_exceeded": (400, False),
    "unauthenticated": (401, False),
    "permission_denied": (403, False),
    "identity_not_found": (404, False),
    "domain_not_found": (404, False),
    "tenant_not_found": (404, False),
    "email_not_found": (404, False),
    "conflict": (409, False),
    "payload_too_large": (413, False),
    "rate_limited": (429, True),
    "internal_error": (500, True),
    "upstream_error": (502, True),
    "unavailable": (503, True),
    "overloaded": (503, False),
    "timeout": (504, True),
}

# RPC-7: a wrong method is 405, "with an err body of its own code". (An unknown path is HTTP 404
# with SPEC 5's invalid_request: no code of the table is for a path.)
RPC7_CODES: dict[str, tuple[int, bool]] = {
    "method_not_allowed": (405, False),
}

_decode_body = msgspec.json.Decoder(ErrorBody)


def test_every_code_is_in_the_spec() -> None:
    """The enum holds exactly the codes of SPEC section 5 plus RPC-7's wrong-method code (ERR):
    no ``not_found`` of its own."""
    assert {c.value for c in ErrorCode} == set(SPEC_TABLE) | set(RPC7_CODES)


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.value)
def test_status_and_retryability_match_the_spec(code: ErrorCode) -> None:
    """Each code's HTTP status and retryable flag are the ones SPEC section 5 gives it (ERR)."""
    expected = {**SPEC_TABLE, **RPC7_CODES}[code.value]
    assert (code.http_status, code.retryable) == expected


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.value)
def test_every_code_has_a_fix(code: ErrorCode) -> None:
    """Every code carries a non-empty default fix telling the caller what to do (ERR)."""
    assert code.default_fix.strip()


def test_overloaded_is_not_retryable_but_unavailable_is() -> None:
    """Callers must not retry ``overloaded`` at once, while ``unavailable`` is retryable (RT-10)."""
    assert not ErrorCode.OVERLOADED.retryable
    assert ErrorCode.UNAVAILABLE.retryable
    assert ErrorCode.OVERLOADED.http_status == ErrorCode.UNAVAILABLE.http_status == 503


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.value)
def test_body_round_trips_through_json(code: ErrorCode) -> None:
    """to_body, msgspec JSON and from_body give back the same code, message, fix and details
    (ERR)."""
    err = MailboxActorsError(
        code, "something went wrong", details={"limit": "params", "max": 100, "path": "$.req"}
    )
    body = err.to_body(request_id="req_01JABCDEFGHJKMNPQRSTVWXYZ0")
    wire = msgspec.json.encode(body)
    decoded = _decode_body.decode(wire)
    assert decoded == body
    back = MailboxActorsError.from_body(decoded)
    assert back.code is code
    assert back.message == "something went wrong"
    assert back.fix == code.default_fix
    assert back.retryable is code.retryable
    assert back.request_id == "req_01JABCDEFGHJKMNPQRSTVWXYZ0"
    assert back.details == {"limit": "params", "max": 100, "path": "$.req"}
    assert back.to_body() == body


def test_body_has_the_spec_fields() -> None:
    """The wire body carries code, message, fix, retryable and request_id, and omits absent details
    (ERR)."""
    body = MailboxActorsError(ErrorCode.CONFLICT, "changed content").to_body("req_x")
    assert msgspec.json.decode(msgspec.json.encode(body)) == {
        "code": "conflict",
        "message": "changed content",
        "fix": ErrorCode.CONFLICT.default_fix,
        "retryable": False,
        "request_id": "req_x",
    }


def test_fix_can_be_overridden_but_retryable_cannot() -> None:
    """A call site may give a specific fix, but status and retryability come only from the table
    (ERR)."""
    body = MailboxActorsError(ErrorCode.RATE_LIMITED, "window full", fix="wait 3 s").to_body()
    assert body.fix == "wait 3 s"
    assert body.retryable is True


def test_unknown_code_is_refused_on_decode() -> None:
    """A body with a code outside the table does not decode (ERR)."""
    wire = b'{"code":"teapot","message":"m","fix":"f","retryable":false}'
    with pytest.raises(msgspec.ValidationError):
        _decode_body.decode(wire)


def test_subclasses_carry_their_codes() -> None:
    """The convenience exceptions map to their codes: invalid_request, limit_exceeded with the
    limit in details (RT-7), overloaded (RT-10) and timeout (RPC-5)."""
    assert InvalidRequest("bad").code is ErrorCode.INVALID_REQUEST
    limit = LimitExceeded("max_bound_parameters", 100, "too many parameters")
    assert limit.code is ErrorCode.LIMIT_EXCEEDED
    assert limit.details == {"limit": "max_bound_parameters", "max": 100}
    assert Overloaded("queue full").code is ErrorCode.OVERLOADED
    deadline = DeadlineExceeded()
    assert deadline.code is ErrorCode.TIMEOUT
    assert deadline.retryable
    for exc in (InvalidRequest("x"), limit, Overloaded("x"), deadline):
        assert isinstance(exc, MailboxActorsError)
