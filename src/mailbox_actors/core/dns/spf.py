"""The SPF check (DM-2, RFC 7208) as a pure planner: fed the answers so far, it either decides or
names the lookups it needs next.

The caller loops: ``plan = evaluate_spf(domain, include, answers)``; while ``plan.queries``, resolve
them, add the answers, evaluate again. Each round re-walks the record tree from the top, in term
order, the way a receiver evaluates it when no term matches (the worst case, which is what the
limits are about):

- every ``include``, ``a``, ``mx``, ``ptr``, ``exists`` and ``redirect`` counts one DNS lookup, also
  inside included records; more than 10 is a permerror (4.6.4) -- an ``mx`` term counts one however
  many MX records it finds, and more than 10 MX records is a permerror of its own;
- a term whose lookup answers NXDOMAIN or no records is a void lookup; more than 2 is a permerror;
- an include or redirect target must hold exactly one SPF record; one already on the path is a loop;
- a ``redirect`` is ignored when the record has an ``all`` (6.1); ``exp`` costs nothing (it is
  fetched only after the result); a domain-spec with a macro is counted and not followed.

A transient answer makes the verdict unknown unless the records read already prove a failure
(a lookup count is a lower bound, so going over 10 with part of the tree unread still fails).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from mailbox_actors.core.dns.answers import TRANSIENT, VOID, Answer, Outcome, Query, Rtype
from mailbox_actors.core.dns.names import normalise_host
from mailbox_actors.core.dns.results import fail, ok, transient, unknown
from mailbox_actors.core.dns.spf_terms import LOOKUP_TERMS, SpfSyntaxError, Term, is_spf, parse_spf
from mailbox_actors.wire.domain import RecordCheck

__all__ = ["MAX_LOOKUPS", "MAX_MX", "MAX_VOID", "SpfPlan", "evaluate_spf"]

MAX_LOOKUPS = 10
MAX_VOID = 2
MAX_MX = 10


class SpfPlan(msgspec.Struct, frozen=True):
    """``result`` once decided (then ``queries`` is empty); else the lookups to make next.
    ``lookups`` and ``voids`` are what the walk counted (a lower bound while undecided)."""

    result: RecordCheck | None
    queries: tuple[Query, ...] = ()
    lookups: int = 0
    voids: int = 0


class _Definite(Exception):
    def __init__(self, result: RecordCheck) -> None:
        self.result = result


class _Walk:
    def __init__(self, answers: Mapping[Query, Answer], expected: str | None) -> None:
        self.answers = answers
        self.expected = expected
        self.lookups = 0
        self.voids = 0
        self.missing: list[Query] = []
        self.transient: Answer | None = None
        self.found_expected = False
        self.macros = 0

    def get(self, name: str, rtype: Rtype) -> Answer | None:
        a = self.answers.get((name, rtype))
        if a is None:
            if (name, rtype) not in self.missing:
                self.missing.append((name, rtype))
        elif a.outcome in TRANSIENT and self.transient is None:
            self.transient = a
        return a

    def count_lookup(self, term: str, at: str) -> None:
        self.lookups += 1
        if self.lookups > MAX_LOOKUPS:
            raise _Definite(fail("spf", "spf_too_many_lookups",
                                 f"the SPF record needs more than {MAX_LOOKUPS} DNS lookups (the "
                                 f"11th is {term} in {at}'s record); receivers answer permerror. "
                                 "Flatten includes or drop a, mx and ptr terms"))

    def count_void(self, term: str, at: str) -> None:
        self.voids += 1
        if self.voids > MAX_VOID:
            raise _Definite(fail("spf", "spf_too_many_void_lookups",
                                 f"more than {MAX_VOID} SPF terms find nothing in DNS (the third "
                                 f"is {term} in {at}'s record); receivers answer permerror. "
                                 "Remove terms that name domains without records"))

    def record(self, name: str, path: tuple[str, ...], via: str) -> list[Term] | None:
        """The SPF terms at ``name``, or None when not read yet (or unreadable now)."""
        a = self.get(name, Rtype.TXT)
        if a is None or a.outcome in TRANSIENT:
            return None
        top = not path
        if a.outcome is Outcome.OVERSIZE:
            raise _Definite(fail("spf", "spf_too_large", f"the TXT records at {name} are too "
                                 "large to evaluate; publish a shorter SPF record"))
        if a.outcome in VOID and not top:
            self.count_void(via, path[-1])
        spf = [r for r in a.records if is_spf(r)]
        if not spf:
            if top:
                raise _Definite(fail("spf", "domain_not_found" if a.outcome is Outcome.NXDOMAIN
                                     else "spf_missing", f"no SPF record at {name}; publish one "
                                     "TXT record v=spf1 ... -all" + (
                                         f" with include:{self.expected}" if self.expected else "")))
            raise _Definite(fail("spf", "spf_include_no_record",
                                 f"{via} in {path[-1]}'s SPF record names {name}, which has no SPF "
                                 "record; receivers answer permerror. Fix or remove it"))
        if len(spf) > 1:
            raise _Definite(fail("spf", "spf_multiple", f"{name} has {len(spf)} SPF records; "
                                 "receivers answer permerror. Merge them into exactly one"))
        try:
            return parse_spf(spf[0])
        except SpfSyntaxError as e:
            raise _Definite(fail("spf", "spf_syntax", f"the SPF record at {name} does not parse: "
                                 f"{e}; receivers answer permerror")) from None

    def follow(self, target: str, here: tuple[str, ...], via: str) -> None:
        target = normalise_host(target)
        if self.expected is not None and target == self.expected:
            self.found_expected = True  # include:, or a redirect= to it
        if target in here:
            raise _Definite(fail("spf", "spf_include_loop",
                                 f"the SPF records loop: {' -> '.join((*here, target))}; "
                                 "receivers answer permerror. Remove the include that closes it"))
        self.walk_at(target, here, via)

    def walk_at(self, name: str, path: tuple[str, ...], via: str) -> None:
        terms = self.record(name, path, via)
        if terms is None:
            return
        here = (*path, name)
        has_all = any(t.kind == "all" for t in terms)
        for t in terms:
            if t.kind not in LOOKUP_TERMS or (t.kind == "redirect" and has_all):
                continue
            self.count_lookup(t.kind if t.target is None else f"{t.kind}:{t.target}", name)
            target = name if t.target is None else t.target
            if "%" in target:
                self.macros += 1  # depends on the sender; counted, not followed
                continue
            if not _carriable(target):
                raise _Definite(fail("spf", "spf_syntax",
                                     f"{t.kind}:{target[:80]} in {name}'s SPF record is not a "
                                     "name DNS can carry (an empty label, a label over 63 or "
                                     "the name over 253 characters); receivers answer "
                                     "permerror. Fix or remove it"))
            if t.kind in ("include", "redirect"):
                self.follow(target, here, t.kind)
            elif t.kind == "a":
                a4, a6 = self.get(target, Rtype.A), self.get(target, Rtype.AAAA)
                if a4 and a6 and a4.outcome in VOID and a6.outcome in VOID:
                    self.count_void(f"a:{target}", name)
            elif t.kind == "mx":
                mx = self.get(target, Rtype.MX)
                if mx and mx.outcome in VOID:
                    self.count_void(f"mx:{target}", name)
                elif mx and len(mx.records) > MAX_MX:
                    raise _Definite(fail("spf", "spf_mx_too_many",
                                         f"mx:{target} in {name}'s SPF record finds "
                                         f"{len(mx.records)} MX records (over {MAX_MX}); "
                                         "receivers answer permerror"))
            elif t.kind == "exists":
                ex = self.get(target, Rtype.A)
                if ex and ex.outcome in VOID:
                    self.count_void(f"exists:{target}", name)


def _carriable(name: str) -> bool:
    """Whether DNS can ask for ``name`` at all (sizes only: a resolver cannot, so an unknown
    answer would hide what receivers treat as a permerror)."""
    return 0 < len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split("."))


def evaluate_spf(domain: str, expected_include: str | None,
                 answers: Mapping[Query, Answer]) -> SpfPlan:
    expected = normalise_host(expected_include) if expected_include else None
    w = _Walk(answers, expected)
    try:
        w.walk_at(domain, (), "")
    except _Definite as d:
        return SpfPlan(d.result, lookups=w.lookups, voids=w.voids)
    if w.missing:
        return SpfPlan(None, tuple(w.missing), lookups=w.lookups, voids=w.voids)
    counted = f"{w.lookups} of {MAX_LOOKUPS} DNS lookups, {w.voids} void"
    if w.transient is not None:
        return SpfPlan(transient("spf", w.transient), lookups=w.lookups, voids=w.voids)
    if expected is not None and not w.found_expected:
        if w.macros:
            return SpfPlan(unknown("spf", "spf_include_unverifiable",
                                   f"include:{expected} was not found, and part of the SPF record "
                                   "uses macros that depend on the sender; check it by hand"),
                           lookups=w.lookups, voids=w.voids)
        return SpfPlan(fail("spf", "spf_include_missing",
                            f"the SPF record at {domain} does not include {expected}; add "
                            f"include:{expected} before the all term ({counted})"),
                       lookups=w.lookups, voids=w.voids)
    return SpfPlan(ok("spf", "spf_ok", f"one SPF record at {domain}; {counted}"),
                   lookups=w.lookups, voids=w.voids)
