"""The MX, DKIM and DMARC checks (DM-2): pure functions from one resolver answer to a verdict.

Each answers pass, fail or unknown with a diagnosis code (``mx_ok``, ``dkim_key_mismatch``, ...)
and a message saying what to change in DNS. Only answers about the domain (records, NXDOMAIN,
NODATA, oversize records) can fail it; a transient answer is unknown. SPF, which needs more
lookups, is ``core.dns.spf``.
"""

from __future__ import annotations

import re

from mailbox_actors.core.dns.answers import TRANSIENT, Answer, Outcome, Query, Rtype
from mailbox_actors.core.dns.names import dns_name, normalise_host
from mailbox_actors.core.dns.results import fail, ok, transient
from mailbox_actors.core.dns.tags import parse_tags
from mailbox_actors.wire.domain import RecordCheck

__all__ = ["DMARC_POLICIES", "check_dkim", "check_dmarc", "check_mx", "dkim_query",
           "dmarc_fallback_query", "dmarc_query", "mx_query"]

DMARC_POLICIES = ("none", "quarantine", "reject")
_SPACE = re.compile(r"\s+")


def mx_query(domain: str) -> Query:
    return (domain, Rtype.MX)


def dkim_query(domain: str, selector: str) -> Query | None:
    """None when selector and domain together are over DNS's sizes (init refuses that)."""
    name = dns_name(selector.lower(), "_domainkey", domain)
    return None if name is None else (name, Rtype.TXT)


def dmarc_query(domain: str) -> Query:
    return (f"_dmarc.{domain}", Rtype.TXT)


def _oversize(record: str, a: Answer) -> RecordCheck:
    return fail(record, f"{record}_too_large",
                f"the {a.rtype} records at {a.name} are too large to evaluate (over 64 records or "
                "a record over 4096 characters); publish a shorter record")


def check_mx(a: Answer, expected_hosts: list[str]) -> RecordCheck:
    if a.outcome in TRANSIENT:
        return transient("mx", a)
    if a.outcome is Outcome.OVERSIZE:
        return _oversize("mx", a)
    if a.outcome is Outcome.NXDOMAIN:
        return fail("mx", "domain_not_found",
                    f"{a.name} does not exist in DNS; register it or check its spelling")
    hosts: list[str] = []
    for r in a.records:
        _pref, _, host = r.partition(" ")
        hosts.append(normalise_host(host))
    if not hosts:
        return fail("mx", "mx_missing", f"{a.name} has no MX record; add one pointing at your "
                    "mail servers" + (f" ({', '.join(expected_hosts)})" if expected_hosts else ""))
    if "" in hosts:
        return fail("mx", "mx_null", f"{a.name} publishes a null MX (RFC 7505): it accepts no "
                    "mail; replace it with your mail servers' MX records")
    missing = [h for h in (normalise_host(e) for e in expected_hosts) if h not in hosts]
    if missing:
        return fail("mx", "mx_host_missing",
                    f"{a.name}'s MX records do not name {', '.join(missing)}; add an MX record "
                    f"for each (found: {', '.join(sorted(set(hosts)))})")
    return ok("mx", "mx_ok", f"{a.name} has {len(hosts)} MX record(s)")


def check_dkim(a: Answer | None, selector: str, expected_key: str | None) -> RecordCheck:
    if a is None:
        return fail("dkim", "dkim_name_too_long",
                    f"the selector {selector!r} makes a DNS name over 253 characters; choose a "
                    "shorter selector")
    if a.outcome in TRANSIENT:
        return transient("dkim", a)
    if a.outcome is Outcome.OVERSIZE:
        return _oversize("dkim", a)
    via = (f" (a CNAME to {a.canonical_name})"
           if a.canonical_name and a.canonical_name != a.name else "")
    if a.outcome in (Outcome.NXDOMAIN, Outcome.NODATA) or not a.records:
        return fail("dkim", "dkim_missing",
                    f"no DKIM key record at {a.name}{via}; publish the selector's TXT record "
                    "(v=DKIM1; k=rsa; p=...) or the CNAME your provider gave you")
    keys = []
    for r in a.records:
        tags = parse_tags(r)
        if "p" in tags and tags.get("v", "DKIM1").upper() == "DKIM1":
            keys.append(_SPACE.sub("", tags["p"]))
    if not keys:
        return fail("dkim", "dkim_no_key",
                    f"the TXT record at {a.name}{via} is not a DKIM key record (no p= tag); "
                    "publish v=DKIM1; k=rsa; p=<public key>")
    if len(keys) > 1:
        return fail("dkim", "dkim_multiple", f"{a.name}{via} holds {len(keys)} DKIM key records; "
                    "keep exactly one per selector")
    if not keys[0]:
        return fail("dkim", "dkim_revoked", f"the DKIM key at {a.name}{via} is revoked (empty "
                    "p=); publish the current public key")
    if expected_key is not None and keys[0] != _SPACE.sub("", expected_key):
        return fail("dkim", "dkim_key_mismatch",
                    f"the DKIM key at {a.name}{via} is not the expected one; replace p= with the "
                    "key your provider gave you")
    return ok("dkim", "dkim_ok", f"DKIM key found at {a.name}{via}")


def dmarc_fallback_query(domain: str, organizational: str | None, a: Answer) -> Query | None:
    """The organizational domain's DMARC question (RFC 7489 6.6.3, step 3), when the domain's own
    answer holds no DMARC record and the domain is below its organizational domain; else None.
    A transient answer is not "no record": it is judged unknown without a fallback."""
    if organizational is None or organizational == domain or a.outcome in TRANSIENT:
        return None
    if a.outcome is Outcome.OVERSIZE or _dmarc_records(a):
        return None
    return dmarc_query(organizational)


def _dmarc_records(a: Answer) -> list[str]:
    return [r for r in a.records if r.strip().upper().startswith("V=DMARC1")
            and r.strip()[8:9] in ("", ";", " ", "\t")]


def check_dmarc(a: Answer, fallback: Answer | None = None) -> RecordCheck:
    """The domain's DMARC record, or (``fallback``, asked when it has none) the organizational
    domain's, whose policy then applies to the domain as well (RFC 7489 6.6.3)."""
    if a.outcome in TRANSIENT:
        return transient("dmarc", a)
    if a.outcome is Outcome.OVERSIZE:
        return _oversize("dmarc", a)
    records = _dmarc_records(a)
    if not records and fallback is not None:
        if fallback.outcome in TRANSIENT:
            return transient("dmarc", fallback)
        if fallback.outcome is Outcome.OVERSIZE:
            return _oversize("dmarc", fallback)
        if _dmarc_records(fallback):
            return _judge_dmarc(fallback, _dmarc_records(fallback),
                                f" (the organizational domain's record; none at {a.name})")
        return fail("dmarc", "dmarc_missing",
                    f"no DMARC record at {a.name} nor at {fallback.name}; publish a TXT record "
                    "such as v=DMARC1; p=none; rua=mailto:<reports address>")
    if not records:
        return fail("dmarc", "dmarc_missing",
                    f"no DMARC record at {a.name}; publish a TXT record such as "
                    "v=DMARC1; p=none; rua=mailto:<reports address>")
    return _judge_dmarc(a, records, "")


def _judge_dmarc(a: Answer, records: list[str], via: str) -> RecordCheck:
    if len(records) > 1:
        return fail("dmarc", "dmarc_multiple", f"{a.name} holds {len(records)} DMARC records; "
                    "receivers ignore all of them (RFC 7489 6.6.3); keep exactly one")
    tags = parse_tags(records[0])
    policy = tags.get("p")
    if policy is None:
        return fail("dmarc", "dmarc_no_policy", f"the DMARC record at {a.name}{via} has no p= "
                    "tag; add p=none, p=quarantine or p=reject")
    if policy.lower() not in DMARC_POLICIES:
        return fail("dmarc", "dmarc_bad_policy",
                    f"the DMARC record at {a.name}{via} has p={policy[:32]!r}; use none, "
                    "quarantine or reject")
    return ok("dmarc", "dmarc_ok", f"DMARC policy {policy.lower()} at {a.name}{via}")

