"""DomainMonitor's init and status (DM-5): the domain and what to expect, stored; the state read.

Init normalises the domain (IDNA, ``core.dns.names``) and every expected record (hosts, selector,
key) or refuses it with ``invalid_request`` naming the field. A repeated init by the same owner may
change the expected records; the domain is fixed (another one is ``conflict``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec

from mailbox_actors.core.dns.checks import dkim_query
from mailbox_actors.core.dns.names import NameRefused, dns_name, normalise_domain, normalise_host
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.actor import Call
from mailbox_actors.wire.domain import (
    CheckRun,
    DomainInit,
    DomainState,
    DomainStatusReply,
    ExpectedRecords,
    RecordCheck,
)
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.shared_replies import InitReply

if TYPE_CHECKING:
    from mailbox_actors.runtime.context import ActorContext

__all__ = ["init", "status", "valid_expected"]

_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_SPACE = re.compile(r"\s+")
_ENC = msgspec.json.Encoder()
_EXPECTED = msgspec.json.Decoder(ExpectedRecords)
_RESULTS = msgspec.json.Decoder(list[RecordCheck])
_RUN = msgspec.json.Decoder(CheckRun)
LAST_CHECKS = 10  # runs kept for status


def _host(field: str, value: str) -> str:
    host = normalise_host(value)
    if host and not host.isascii():
        try:
            host = normalise_domain(host)
        except NameRefused as e:
            raise InvalidRequest(f"{field}: {e}", details={"field": field}) from None
    if dns_name(host) is None or "." not in host:
        raise InvalidRequest(f"{field} must be a DNS host name such as _spf.provider.example",
                             details={"field": field})
    return host


def valid_expected(domain: str, e: ExpectedRecords) -> ExpectedRecords:
    """The expected records, normalised, or ``invalid_request`` naming the bad field."""
    key = None
    if e.dkim_key is not None:
        key = _SPACE.sub("", e.dkim_key)
        if not key or not _BASE64.fullmatch(key):
            raise InvalidRequest("expected.dkim_key must be the base64 public key (the p= value)",
                                 details={"field": "expected.dkim_key"})
        if e.dkim_selector is None:
            raise InvalidRequest("expected.dkim_key needs expected.dkim_selector",
                                 details={"field": "expected.dkim_selector"})
    selector = None
    if e.dkim_selector is not None:
        selector = e.dkim_selector.strip().lower()
        if dkim_query(domain, selector) is None:
            raise InvalidRequest("expected.dkim_selector must be DNS labels that, with "
                                 "._domainkey and the domain, fit in 253 characters",
                                 details={"field": "expected.dkim_selector"})
    return ExpectedRecords(
        spf_include=None if e.spf_include is None else _host("expected.spf_include", e.spf_include),
        dkim_selector=selector, dkim_key=key,
        mx_hosts=[_host("expected.mx_hosts", h) for h in e.mx_hosts])


def init(ctx: ActorContext, tx: SqlStorage, call: Call, req: DomainInit) -> InitReply:
    try:
        name = normalise_domain(req.domain)
    except NameRefused as e:
        raise InvalidRequest(str(e), details={"field": "domain"}) from None
    expected = valid_expected(name, req.expected)
    created = ctx.claim_owner(call)
    now = tx.now_ms()
    if created:
        tx.exec("INSERT INTO domain (id, name, state, created_at_ms, expected) "
                "VALUES (1, ?, 'pending', ?, ?)", name, now, _ENC.encode(expected))
        ctx.emit(tx, "domain.created", {"state": DomainState.PENDING.value})
        ctx.schedule("check", now)  # the first check runs at once
        return InitReply(created=True)
    existing, stored = tx.exec("SELECT name, expected FROM domain WHERE id = 1").one()
    if existing != name:
        raise MailboxActorsError(ErrorCode.CONFLICT,
                                 "this monitor already watches a different domain")
    blob = _ENC.encode(expected)
    if blob != stored:
        # New expectations: the last verdicts answered the old ones, so check again now (a
        # failed domain has no periodic check that would).
        tx.exec("UPDATE domain SET expected = ? WHERE id = 1", blob)
        ctx.schedule("check", now)
    return InitReply(created=False)


def load_expected(blob: bytes | None) -> ExpectedRecords:
    return ExpectedRecords() if blob is None else _EXPECTED.decode(blob)


def status(ctx: ActorContext, sql: SqlStorage) -> DomainStatusReply:
    name, state, expected, failures, results = sql.exec(
        "SELECT name, state, expected, consecutive_failures, last_results FROM domain "
        "WHERE id = 1").one()
    runs = [_RUN.decode(r[0]) for r in sql.exec(
        "SELECT run FROM checks ORDER BY id DESC LIMIT ?", LAST_CHECKS)]
    return DomainStatusReply(
        tenant_id=ctx.owner_tenant or "", domain=name, state=state,
        schema_version=ctx.schema_version, alarm=sql.get_alarm(),
        expected=load_expected(expected), consecutive_failures=failures,
        next_check_ms=ctx.scheduled().get("check"),
        results=[] if results is None else _RESULTS.decode(results), last_checks=runs)
