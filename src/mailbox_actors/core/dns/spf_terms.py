"""SPF record syntax (RFC 7208 4.5, 4.6.1, 5, 6): which TXT records are SPF, and their terms.

Only what the domain check needs: each term's kind and its domain-spec. A record that does not
parse is a permerror for receivers, so the check reports it as ``spf_syntax`` with the bad term.
"""

from __future__ import annotations

import msgspec

__all__ = ["LOOKUP_TERMS", "MECHANISMS", "SpfSyntaxError", "Term", "is_spf", "parse_spf"]

MECHANISMS = frozenset({"all", "include", "a", "mx", "ptr", "ip4", "ip6", "exists"})
# Terms that cost a DNS lookup (RFC 7208 4.6.4); "redirect" is a modifier that does too.
LOOKUP_TERMS = frozenset({"include", "a", "mx", "ptr", "exists", "redirect"})
_NEEDS_TARGET = frozenset({"include", "exists", "ip4", "ip6", "redirect"})
_QUALIFIERS = "+-~?"


class SpfSyntaxError(ValueError):
    pass


class Term(msgspec.Struct, frozen=True):
    kind: str  # a mechanism name, "redirect", or "modifier" (exp and unknown modifiers)
    target: str | None  # the domain-spec (or ip for ip4/ip6), lower-cased; None: the current one


def is_spf(record: str) -> bool:
    """RFC 7208 4.5: exactly "v=spf1", alone or followed by a space (case-insensitive)."""
    head = record[:7].lower()
    return head == "v=spf1" or head == "v=spf1 "


def _term(text: str) -> Term:
    low = text.lower()
    name, eq, value = low.partition("=")
    if eq and name and all(c.isalnum() or c in "-_." for c in name) and name[0].isalpha():
        if name == "redirect":
            if not value:
                raise SpfSyntaxError("redirect= has no domain")
            return Term("redirect", value.removesuffix("."))
        return Term("modifier", value or None)
    body = low[1:] if low[:1] in _QUALIFIERS else low
    mech, colon, target = body.partition(":")
    cidr = ""
    if "/" in mech:  # a/24, mx//64
        mech, _, cidr = mech.partition("/")
    if mech not in MECHANISMS:
        raise SpfSyntaxError(f"unknown mechanism {text[:40]!r}")
    if mech in ("a", "mx") and "/" in target and "%" not in target:
        target = target.split("/", 1)[0]
    if colon and not target:
        raise SpfSyntaxError(f"{mech}: has an empty domain")
    if mech in _NEEDS_TARGET and not target:
        raise SpfSyntaxError(f"{mech} needs a domain or address")
    if mech == "all" and (colon or cidr):
        raise SpfSyntaxError("all takes no argument")
    return Term(mech, target.removesuffix(".") if target else None)


def parse_spf(record: str) -> list[Term]:
    """The terms after ``v=spf1``; ``SpfSyntaxError`` on a term receivers would refuse."""
    terms = [_term(t) for t in record.split()[1:]]
    if sum(1 for t in terms if t.kind == "redirect") > 1:
        raise SpfSyntaxError("more than one redirect=")
    return terms
