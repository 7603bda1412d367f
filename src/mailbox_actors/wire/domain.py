"""DomainMonitor's requests and replies (OBJ-3, DM-5), namespace ``domain_monitor``.

A domain arrives as text (a U-label is allowed: the monitor normalises it to its A-label or refuses
it, ``core.dns.names``); per-record results are ``RecordCheck``s, each pass, fail or unknown with a
diagnosis code an operator can look up in the README.
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec

from mailbox_actors.wire.post import DeadLetterPage, PostDeadLetters, PostRetry, PostRetryReply
from mailbox_actors.wire.shared_replies import InitReply

__all__ = ["DOMAIN_PATTERN", "DOMAIN_REPLIES", "DOMAIN_STATES", "CheckReply", "CheckRun",
           "DomainCheck", "DomainInit", "DomainRequest", "DomainState", "DomainStatus",
           "DomainStatusReply", "ExpectedRecords", "RecordCheck", "Verdict"]

# A DNS name in A-label form: letters, digits, hyphens; an alphabetic top-level label or an IDNA
# one (xn--...). The control database stores domains by it too.
DOMAIN_PATTERN = (r"^(?=.{3,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+"
                  r"([a-z]{2,63}|xn--[a-z0-9-]{1,59})$(?!\n)")
_Text = Annotated[str, msgspec.Meta(max_length=1024)]
_Host = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]


class Verdict(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"  # DNS could not answer now: never counts against the domain (DM-2)


class DomainState(enum.StrEnum):
    PENDING = "pending"
    VERIFIED = "verified"
    FAILING = "failing"
    FAILED = "failed"  # pending that never verified within the expiry (DM-3)


DOMAIN_STATES: tuple[str, ...] = tuple(s.value for s in DomainState)


class ExpectedRecords(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """What the sending provider needs to find in the domain's DNS (all optional)."""

    spf_include: _Host | None = None  # e.g. "_spf.provider.example"
    dkim_selector: Annotated[str, msgspec.Meta(min_length=1, max_length=63)] | None = None
    dkim_key: Annotated[str, msgspec.Meta(max_length=8192)] | None = None  # base64 of p=
    mx_hosts: Annotated[list[_Host], msgspec.Meta(max_length=16)] = []


# What init accepts before IDNA normalisation: one token, no whitespace or control characters.
_DomainText = Annotated[str, msgspec.Meta(min_length=1, max_length=253,
                                          pattern=r"^[^\s\x00-\x1f\x7f]+$(?!\n)")]


class DomainInit(msgspec.Struct, tag="init", tag_field="op", forbid_unknown_fields=True):
    domain: _DomainText
    expected: ExpectedRecords = ExpectedRecords()


class DomainCheck(msgspec.Struct, tag="check", tag_field="op", forbid_unknown_fields=True):
    """Run every check now (DM-5) and apply the result to the state, as the alarm does."""


class DomainStatus(msgspec.Struct, tag="status", tag_field="op", forbid_unknown_fields=True):
    pass


# post_dead_letters, post_retry: its state events go to the tenant's Notifier by Post (OBJ-4).
DomainRequest = DomainInit | DomainCheck | DomainStatus | PostDeadLetters | PostRetry


class RecordCheck(msgspec.Struct, frozen=True):
    """One record's verdict: ``record`` is mx, spf, dkim or dmarc; ``code`` a diagnosis code."""

    record: str
    verdict: Verdict
    code: str
    message: _Text


class CheckRun(msgspec.Struct, frozen=True):
    """One run of the checks and what it did to the state."""

    at_ms: int
    verdict: Verdict
    state: DomainState
    results: list[RecordCheck]


class CheckReply(msgspec.Struct):
    state: DomainState
    verdict: Verdict
    consecutive_failures: int
    results: list[RecordCheck]


class DomainStatusReply(msgspec.Struct):
    tenant_id: str
    domain: str
    state: str
    schema_version: int
    alarm: int | None
    expected: ExpectedRecords = ExpectedRecords()
    consecutive_failures: int = 0
    next_check_ms: int | None = None
    results: list[RecordCheck] = []  # the last run's, per record
    last_checks: list[CheckRun] = []  # newest first


DOMAIN_REPLIES: dict[str, type] = {"init": InitReply, "check": CheckReply,
                                   "status": DomainStatusReply,
                                   "post_dead_letters": DeadLetterPage,
                                   "post_retry": PostRetryReply}
