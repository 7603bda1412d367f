"""What ``submit`` refuses before anything is stored (CA-1, CA-5, CA-14): each problem is
``invalid_request`` or ``limit_exceeded`` naming the field (``details.field``), never quoting it.

Addresses must be addr-specs; a subject or header value must be one line; headers follow the
Cloudflare-style send's rules (``details.provider_code`` says which CA-5 code it would answer);
at most 50 recipients and 5 MiB of content.
"""

from __future__ import annotations

import functools

from mailbox_actors.core.carrier.addresses import address_problem, header_problem, headers_problem
from mailbox_actors.core.carrier.addresses import text_problem as line_problem
from mailbox_actors.wire.carrier import Submit
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

__all__ = ["MAX_CONTENT_BYTES", "MAX_RECIPIENTS", "check_submit"]

MAX_RECIPIENTS = 50
MAX_CONTENT_BYTES = 5 * 1024 * 1024


def _invalid(field: str, why: str, **details: object) -> InvalidRequest:
    return InvalidRequest(f"{field} {why}", details={"field": field, **details})


def _limit(field: str, why: str, limit: int) -> MailboxActorsError:
    return MailboxActorsError(ErrorCode.LIMIT_EXCEEDED, f"{field}: {why}",
                              details={"field": field, "limit": limit})


def _check_headers(headers: dict[str, str]) -> None:
    for name, value in headers.items():
        problem = header_problem(name, value)
        if problem is not None:
            # The name is the caller's own key, checked to be printable ASCII before quoting it.
            shown = name if problem[0] != "E_HEADER_NAME_INVALID" else "?"
            raise _invalid(f"headers.{shown}", problem[1], provider_code=problem[0])
    problem = headers_problem(headers)
    if problem is not None:
        if problem[0] == "E_HEADER_NAME_INVALID":
            raise _invalid("headers", problem[1], provider_code=problem[0])
        raise MailboxActorsError(ErrorCode.LIMIT_EXCEEDED, f"headers: {problem[1]}",
                                 details={"field": "headers", "provider_code": problem[0]})


# An identity sends from the same few addresses again and again: each is checked once per process
# (the answer depends on the text alone). Only senders, the identity's own addresses, are kept;
# recipients vary too much to be worth it, and no recipient address stays in memory.
_sender_problem = functools.lru_cache(maxsize=64)(address_problem)


def check_submit(req: Submit) -> None:
    """Raise for the first problem found; return when the Email may be stored."""
    bad = _sender_problem(req.from_)
    if bad is not None:
        raise _invalid("from", bad)
    for role in ("to", "cc", "bcc"):
        for i, address in enumerate(getattr(req, role)):
            bad = address_problem(address)
            if bad is not None:
                raise _invalid(f"{role}[{i}]", bad)
    count = len(req.to) + len(req.cc) + len(req.bcc)
    if count == 0:
        raise _invalid("to", "is empty: an email needs at least one recipient in to, cc or bcc")
    if count > MAX_RECIPIENTS:
        raise _limit("to", f"{count} recipients in to, cc and bcc; at most {MAX_RECIPIENTS}",
                     MAX_RECIPIENTS)
    bad = line_problem(req.subject)
    if bad is not None:
        raise _invalid("subject", bad)
    if req.text is None and req.html is None:
        raise _invalid("text", "and html are both null: send text, html or both")
    chars = len(req.subject) + len(req.text or "") + len(req.html or "")
    if req.headers:  # most Emails set none
        _check_headers(req.headers)
        chars += sum(len(k) + len(v) for k, v in req.headers.items())
    # A character is at most four bytes of UTF-8: only content that could pass the limit is
    # encoded to be measured.
    if chars * 4 <= MAX_CONTENT_BYTES:
        return
    size = (len(req.subject.encode()) + len((req.text or "").encode())
            + len((req.html or "").encode())
            + sum(len(k.encode()) + len(v.encode()) for k, v in req.headers.items()))
    if size > MAX_CONTENT_BYTES:
        raise _limit("content", f"{size} bytes of text, html, subject and headers; at most "
                     f"{MAX_CONTENT_BYTES}",
                     MAX_CONTENT_BYTES)
