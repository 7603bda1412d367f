"""The pure DNS verdicts of DomainMonitor (DM-2, DM-5): MX, DKIM, DMARC, SPF and IDNA names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailbox_actors.core.dns.answers import Answer, Outcome, Query, Rtype
from mailbox_actors.core.dns.checks import (
    check_dkim,
    check_dmarc,
    check_mx,
    dkim_query,
    dmarc_fallback_query,
)
from mailbox_actors.core.dns.names import NameRefused, normalise_domain
from mailbox_actors.core.dns.results import combine
from mailbox_actors.core.dns.spf import MAX_LOOKUPS, SpfPlan, evaluate_spf
from mailbox_actors.core.dns.tags import parse_tags
from mailbox_actors.wire.domain import Verdict

no_deadline = settings(deadline=None)


def rec(name: str, rtype: Rtype, *records: str) -> Answer:
    return Answer(name, rtype, Outcome.RECORDS if records else Outcome.NODATA, tuple(records))


def out(name: str, rtype: Rtype, outcome: Outcome) -> Answer:
    return Answer(name, rtype, outcome, detail="test")


# ---- names ---------------------------------------------------------------------------------------

def test_domains_are_normalised_to_their_a_label_or_refused() -> None:
    """DM-5: init takes a domain as an A-label (lower-cased, trailing dot dropped) or a U-label it
    converts by IDNA 2008/UTS 46; anything else is refused with a reason."""
    assert normalise_domain("Example.COM.") == "example.com"
    assert normalise_domain("bücher.example") == "xn--bcher-kva.example"
    assert normalise_domain("пример.рф") == "xn--e1afmkfd.xn--p1ai"
    assert normalise_domain("xn--bcher-kva.example") == "xn--bcher-kva.example"
    for bad in ("", "localhost", "exa mple.com", "-bad.com", "a..b.com", "1.2.3.4",
                "xn--zz.example", "a" * 64 + ".com", ("a" * 60 + ".") * 5 + "com",
                "under_score.com", "☃.☃", "example .com"):
        with pytest.raises(NameRefused):
            normalise_domain(bad)


@given(st.text(max_size=80))
@no_deadline
def test_any_text_is_normalised_or_refused_never_raising_otherwise(text: str) -> None:
    """DM-5: whatever text init gets, normalisation answers a name in A-label form or NameRefused."""
    try:
        name = normalise_domain(text)
    except NameRefused:
        return
    assert name.isascii() and name == name.lower() and len(name) <= 253
    assert normalise_domain(name) == name


# ---- MX ------------------------------------------------------------------------------------------

def test_mx_passes_fails_and_is_unknown_on_dns_errors() -> None:
    """DM-2: MX passes with records naming the expected hosts, fails when missing, null or
    without an expected host, and is unknown (never fail) on a timeout or SERVFAIL."""
    d = "example.com"
    good = rec(d, Rtype.MX, "10 mx1.provider.net.", "20 mx2.provider.net")
    assert check_mx(good, ["MX1.provider.net"]).verdict is Verdict.PASS
    assert check_mx(good, []).code == "mx_ok"
    assert check_mx(rec(d, Rtype.MX), []).code == "mx_missing"
    assert check_mx(out(d, Rtype.MX, Outcome.NXDOMAIN), []).code == "domain_not_found"
    assert check_mx(rec(d, Rtype.MX, "0 ."), []).code == "mx_null"
    r = check_mx(good, ["mx3.provider.net"])
    assert (r.verdict, r.code) == (Verdict.FAIL, "mx_host_missing") and "mx3.provider.net" in r.message
    for o in (Outcome.TIMEOUT, Outcome.SERVFAIL, Outcome.ERROR):
        r = check_mx(out(d, Rtype.MX, o), [])
        assert (r.verdict, r.code) == (Verdict.UNKNOWN, f"dns_{o.value}")
    assert check_mx(out(d, Rtype.MX, Outcome.OVERSIZE), []).code == "mx_too_large"


# ---- DKIM ----------------------------------------------------------------------------------------

KEY = "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC1"


def test_dkim_finds_the_selectors_key_directly_or_through_a_cname() -> None:
    """DM-2: DKIM passes on the selector's TXT with p= (also reached by a CNAME), checks the
    expected key when configured, and fails on no record, no p=, an empty (revoked) p=, two keys."""
    q = dkim_query("example.com", "s1")
    assert q == ("s1._domainkey.example.com", Rtype.TXT)
    name = q[0]
    assert check_dkim(rec(name, Rtype.TXT, f"v=DKIM1; k=rsa; p={KEY}"), "s1", None).code == "dkim_ok"
    via = Answer(name, Rtype.TXT, Outcome.RECORDS, (f"k=rsa; p={KEY[:10]} {KEY[10:]}",),
                 canonical_name="s1.keys.provider.net")
    r = check_dkim(via, "s1", KEY)
    assert r.verdict is Verdict.PASS and "CNAME to s1.keys.provider.net" in r.message
    assert check_dkim(rec(name, Rtype.TXT, f"p={KEY}"), "s1", KEY[:-1] + "X").code == \
        "dkim_key_mismatch"
    assert check_dkim(rec(name, Rtype.TXT), "s1", None).code == "dkim_missing"
    assert check_dkim(out(name, Rtype.TXT, Outcome.NXDOMAIN), "s1", None).code == "dkim_missing"
    assert check_dkim(rec(name, Rtype.TXT, "v=spf1 -all"), "s1", None).code == "dkim_no_key"
    assert check_dkim(rec(name, Rtype.TXT, "v=DKIM1; p="), "s1", None).code == "dkim_revoked"
    assert check_dkim(rec(name, Rtype.TXT, f"p={KEY}", "p=AAAA"), "s1", None).code == \
        "dkim_multiple"
    assert check_dkim(out(name, Rtype.TXT, Outcome.TIMEOUT), "s1", None).verdict is \
        Verdict.UNKNOWN
    assert dkim_query("example.com", "x" * 64) is None
    assert check_dkim(None, "x" * 64, None).code == "dkim_name_too_long"


# ---- DMARC ---------------------------------------------------------------------------------------

def test_dmarc_falls_back_to_the_organizational_domain_only_without_a_record_of_its_own(
        ) -> None:
    """DM-2, RFC 7489 6.6.3: a domain with no DMARC record (none, NXDOMAIN, or only non-DMARC
    TXT) asks its organizational domain, whose record then applies; a domain with a record, one
    that is its own organizational domain, or a transient answer asks nothing more; the
    fallback's own verdicts (missing, transient, bad) are the domain's."""
    own, org = "_dmarc.news.example.co.uk", "_dmarc.example.co.uk"
    missing = rec(own, Rtype.TXT, "unrelated")
    assert dmarc_fallback_query("news.example.co.uk", "example.co.uk", missing) == (org, Rtype.TXT)
    assert dmarc_fallback_query("news.example.co.uk", "example.co.uk",
                                out(own, Rtype.TXT, Outcome.NXDOMAIN)) == (org, Rtype.TXT)
    assert dmarc_fallback_query("news.example.co.uk", "example.co.uk",
                                rec(own, Rtype.TXT, "v=DMARC1; p=none")) is None
    assert dmarc_fallback_query("example.co.uk", "example.co.uk", missing) is None
    assert dmarc_fallback_query("news.example.co.uk", None, missing) is None
    assert dmarc_fallback_query("news.example.co.uk", "example.co.uk",
                                out(own, Rtype.TXT, Outcome.TIMEOUT)) is None
    r = check_dmarc(missing, rec(org, Rtype.TXT, "v=DMARC1; p=reject"))
    assert (r.verdict, r.code) == (Verdict.PASS, "dmarc_ok")
    assert "organizational" in r.message and org in r.message
    r = check_dmarc(missing, rec(org, Rtype.TXT))
    assert r.code == "dmarc_missing" and own in r.message and org in r.message
    assert check_dmarc(missing, out(org, Rtype.TXT, Outcome.SERVFAIL)).verdict is Verdict.UNKNOWN
    assert check_dmarc(missing, rec(org, Rtype.TXT, "v=DMARC1; p=maybe")).code == \
        "dmarc_bad_policy"
    assert check_dmarc(missing).code == "dmarc_missing"


def test_dmarc_needs_one_record_with_a_policy_and_tolerates_junk_tags() -> None:
    """DM-2: DMARC passes on one v=DMARC1 record with p=none|quarantine|reject, whatever junk tags
    it also carries; fails when missing, doubled, without p= or with another policy."""
    n = "_dmarc.example.com"
    junk = "v=DMARC1;; p=Reject ; rua=mailto:x@example.com; zz=?; novalue; =; pct=abc;"
    r = check_dmarc(rec(n, Rtype.TXT, "unrelated", junk))
    assert (r.verdict, r.code) == (Verdict.PASS, "dmarc_ok") and "reject" in r.message
    assert check_dmarc(rec(n, Rtype.TXT)).code == "dmarc_missing"
    assert check_dmarc(rec(n, Rtype.TXT, "v=DMARC10; p=none")).code == "dmarc_missing"
    assert check_dmarc(rec(n, Rtype.TXT, "v=DMARC1; p=none", "v=DMARC1; p=reject")).code == \
        "dmarc_multiple"
    assert check_dmarc(rec(n, Rtype.TXT, "v=DMARC1; rua=mailto:a@b.c")).code == "dmarc_no_policy"
    assert check_dmarc(rec(n, Rtype.TXT, "v=DMARC1; p=maybe")).code == "dmarc_bad_policy"
    assert check_dmarc(out(n, Rtype.TXT, Outcome.SERVFAIL)).verdict is Verdict.UNKNOWN


@given(st.text(max_size=200))
@no_deadline
def test_tag_lists_never_raise(text: str) -> None:
    """DM-2: any TXT text parses into tags (junk is skipped), and DMARC answers a verdict for it."""
    assert isinstance(parse_tags(text), dict)
    assert check_dmarc(rec("_dmarc.x.com", Rtype.TXT, text)).verdict in set(Verdict)


# ---- SPF -----------------------------------------------------------------------------------------

def run_spf(zone: Mapping[Query, Answer], domain: str = "example.com",
            include: str | None = "_spf.provider.net", rounds: int = 50) -> SpfPlan:
    """Drive the planner like the monitor does; a name the zone lacks is NXDOMAIN."""
    answers: dict[Query, Answer] = {}
    for _ in range(rounds):
        plan = evaluate_spf(domain, include, answers)
        if plan.result is not None:
            assert not plan.queries
            return plan
        assert plan.queries
        for q in plan.queries:
            assert q not in answers, "a query is never asked twice"
            answers[q] = zone.get(q) or out(q[0], q[1], Outcome.NXDOMAIN)
    raise AssertionError("the planner did not decide")


def txt(name: str, *records: str) -> tuple[Query, Answer]:
    return (name, Rtype.TXT), rec(name, Rtype.TXT, *records)


PROVIDER = dict([txt("_spf.provider.net", "v=spf1 ip4:192.0.2.0/24 -all")])


def test_spf_passes_with_one_record_including_the_provider() -> None:
    """DM-2: one v=spf1 record that includes the provider passes, with its lookups counted."""
    zone = PROVIDER | dict([txt("example.com", "google-site-verification=x",
                                "v=spf1 include:_spf.provider.net ~all")])
    plan = run_spf(zone)
    assert plan.result is not None and plan.result.code == "spf_ok"
    assert (plan.lookups, plan.voids) == (1, 0)


def test_spf_failures_each_have_their_diagnosis() -> None:
    """DM-2: no record, two records, a missing provider include, a syntax error, an include of a
    name without SPF, and an include loop each fail with their own code."""
    def code(zone: Mapping[Query, Answer], include: str | None = "_spf.provider.net") -> str:
        plan = run_spf(PROVIDER | zone, include=include)
        assert plan.result is not None and plan.result.verdict is Verdict.FAIL, plan
        return plan.result.code

    assert code(dict([txt("example.com", "hello")])) == "spf_missing"
    assert code({}) == "domain_not_found"
    assert code(dict([txt("example.com", "v=spf1 -all", "v=spf1 +all")])) == "spf_multiple"
    assert code(dict([txt("example.com", "v=spf1 ip4:198.51.100.1 -all")])) == \
        "spf_include_missing"
    assert code(dict([txt("example.com", "v=spf1 include:_spf.provider.net foo:bar -all")])) == \
        "spf_syntax"
    assert code(dict([txt("example.com", "v=spf1 include:_spf.provider.net include:nospf.net "
                                         "-all"), txt("nospf.net", "other")])) == \
        "spf_include_no_record"
    loop = dict([txt("example.com", "v=spf1 include:a.net -all"),
                 txt("a.net", "v=spf1 include:b.net"), txt("b.net", "v=spf1 include:a.net")])
    assert code(loop) == "spf_include_loop"
    assert code(dict([txt("example.com", "v=spf1 include:example.com")])) == "spf_include_loop"


def test_spf_target_dns_cannot_carry_is_a_syntax_failure_not_unknown() -> None:
    """DM-2: an include, a or mx naming a label over 63 characters, an empty label or a name over
    253 characters fails as spf_syntax without a lookup (no resolver can ask for it, so waiting
    for an answer would leave the domain unknown for ever)."""
    for target in ("x" * 64 + ".example", "a..example", ".".join(["abcdefghi"] * 26)):
        for term in (f"include:{target}", f"a:{target}", f"mx:{target}"):
            plan = run_spf(PROVIDER | dict([txt(
                "example.com", f"v=spf1 include:_spf.provider.net {term} -all")]))
            assert plan.result is not None and plan.result.code == "spf_syntax", (term, plan)
            assert all(q[0] != target for q in plan.queries)


def test_spf_counts_ten_lookups_as_allowed_and_eleven_as_too_many() -> None:
    """DM-2 (RFC 7208 4.6.4): include, a, mx, ptr, exists and redirect count, nested includes too;
    ip4, ip6, all and exp do not; 10 pass, 11 fail."""
    addr = {(n, t): rec(n, t, "192.0.2.1") for n in ("h.example.com",) for t in (Rtype.A,
                                                                                Rtype.AAAA)}
    mx = {("example.com", Rtype.MX): rec("example.com", Rtype.MX, "10 h.example.com")}
    nested = dict([txt("n.net", "v=spf1 a:h.example.com ptr ip6:2001:db8::/32 ?all")])
    base = "v=spf1 include:_spf.provider.net mx include:n.net exists:h.example.com ip4:1.2.3.4 " \
           "exp=explain.example.com"  # 1 + 1 + 3 + 1 = 6 lookups
    nine = base + " a:h.example.com mx:example.com a:h.example.com"
    ten = dict([txt("example.com", nine + " redirect=_spf.provider.net")])
    plan = run_spf(PROVIDER | nested | addr | mx | ten)
    assert plan.result is not None and plan.result.code == "spf_ok" and plan.lookups == MAX_LOOKUPS
    eleven = dict([txt("example.com", nine + " ptr:x.org redirect=_spf.provider.net")])
    plan = run_spf(PROVIDER | nested | addr | mx | eleven)
    assert plan.result is not None and plan.result.code == "spf_too_many_lookups"
    # with an all term the redirect is ignored (RFC 7208 6.1), so it is not counted
    with_all = dict([txt("example.com", nine + " ptr:x.org -all redirect=_spf.provider.net")])
    assert run_spf(PROVIDER | nested | addr | mx | with_all).lookups == MAX_LOOKUPS


def test_spf_counts_void_lookups_two_allowed_three_too_many() -> None:
    """DM-2 (RFC 7208 4.6.4): terms whose lookup finds nothing (NXDOMAIN or no records) count as
    void; two pass, the third fails."""
    two = dict([txt("example.com", "v=spf1 include:_spf.provider.net a:gone1.net mx:gone2.net "
                                   "-all")])
    plan = run_spf(PROVIDER | two)
    assert plan.result is not None and plan.result.code == "spf_ok" and plan.voids == 2
    three = dict([txt("example.com", "v=spf1 include:_spf.provider.net a:gone1.net mx:gone2.net "
                                     "exists:gone3.net -all")])
    plan = run_spf(PROVIDER | three)
    assert plan.result is not None and plan.result.code == "spf_too_many_void_lookups"


def test_spf_is_unknown_on_a_timeout_unless_what_was_read_already_fails() -> None:
    """DM-2: a timed-out include makes SPF unknown (never fail); but a record that is over the
    lookup limit in the part that was read fails whatever the rest says."""
    slow = {("slow.net", Rtype.TXT): out("slow.net", Rtype.TXT, Outcome.TIMEOUT)}
    zone = PROVIDER | slow | dict([txt("example.com", "v=spf1 include:slow.net -all")])
    plan = run_spf(zone)
    assert plan.result is not None and plan.result.verdict is Verdict.UNKNOWN
    assert plan.result.code == "dns_timeout"
    top = {("example.com", Rtype.TXT): out("example.com", Rtype.TXT, Outcome.SERVFAIL)}
    assert run_spf(top).result.verdict is Verdict.UNKNOWN  # type: ignore[union-attr]
    many = " ".join(f"include:i{i}.net" for i in range(11))
    plan = run_spf(slow | dict([txt("example.com", f"v=spf1 include:slow.net {many}")])
                   | {(f"i{i}.net", Rtype.TXT): out(f"i{i}.net", Rtype.TXT, Outcome.TIMEOUT)
                      for i in range(11)})
    assert plan.result is not None and plan.result.code == "spf_too_many_lookups"


# A reference count for generated include trees: every node's lookup terms, recursively.
@st.composite
def spf_trees(draw: st.DrawFn) -> tuple[dict[Query, Answer], int, bool]:
    n = draw(st.integers(1, 6))
    names = [f"n{i}.net" for i in range(n)]
    zone: dict[Query, Answer] = {}
    children: dict[str, list[str]] = {}
    extra: dict[str, int] = {}
    for i, name in enumerate(names):
        kids = draw(st.lists(st.sampled_from(names[i + 1:]), max_size=3)) if i + 1 < n else []
        ips = draw(st.integers(0, 3))
        ptrs = draw(st.integers(0, 2))
        terms = [f"include:{k}" for k in kids] + ["ip4:192.0.2.1"] * ips + ["ptr"] * ptrs
        terms = draw(st.permutations(terms))
        zone[(name, Rtype.TXT)] = rec(name, Rtype.TXT, "v=spf1 " + " ".join([*terms, "-all"]))
        children[name], extra[name] = kids, ptrs

    def count(name: str) -> int:
        return extra[name] + sum(1 + count(k) for k in children[name])
    return zone, count(names[0]), False


@given(spf_trees())
@no_deadline
def test_spf_lookup_count_matches_a_reference_count_on_any_include_tree(
        tree: tuple[dict[Query, Answer], int, bool]) -> None:
    """DM-2: on generated include trees (acyclic, shared subtrees counted each time they are
    included), the planner's count equals the recursive count, and the verdict follows the limit."""
    zone, expected, _ = tree
    plan = run_spf(zone, domain="n0.net", include=None)
    assert plan.result is not None
    if expected <= MAX_LOOKUPS:
        assert (plan.result.code, plan.lookups) == ("spf_ok", expected)
    else:
        assert plan.result.code == "spf_too_many_lookups" and plan.lookups == MAX_LOOKUPS + 1


@given(st.lists(st.text(alphabet="v=spf1 :.-~+?/%{}abcdmxinlude0123456789", max_size=60),
                max_size=3))
@no_deadline
def test_spf_answers_a_verdict_for_any_records(records: list[str]) -> None:
    """DM-2: whatever TXT records a domain holds, the planner decides within bounded rounds,
    never raising."""
    plan = run_spf(dict([txt("example.com", *records)]), include=None)
    assert plan.result is not None


def test_the_run_verdict_is_fail_then_unknown_then_pass() -> None:
    """DM-2/DM-3: a run fails when any record fails, is unknown when any is unknown, else passes."""
    p = check_dmarc(rec("_dmarc.x.com", Rtype.TXT, "v=DMARC1; p=none"))
    u = check_dmarc(out("_dmarc.x.com", Rtype.TXT, Outcome.TIMEOUT))
    f = check_dmarc(rec("_dmarc.x.com", Rtype.TXT))
    assert combine([p, u, f]) is Verdict.FAIL
    assert combine([p, u]) is Verdict.UNKNOWN
    assert combine([p, p]) is Verdict.PASS


# ---- hostile DNS (tests/support/hostile_dns.py) -----------------------------------------------------------

def _answers_from(zone: list[tuple[str, str, str]]) -> dict[Query, Answer]:
    """What a resolver makes of the zone: records per (name, type), CNAMEs followed once."""
    from mailbox_actors.core.dns.answers import MAX_RECORD_CHARS, MAX_RECORDS

    table: dict[Query, list[str]] = {}
    for name, rtype, value in zone:
        table.setdefault((name, Rtype(rtype) if rtype != "CNAME" else rtype), []).append(value)  # type: ignore[arg-type]
    out: dict[Query, Answer] = {}
    for (name, rtype), values in table.items():
        if rtype == "CNAME":
            target = values[0]
            for (tname, ttype), tvalues in table.items():
                if tname == target and ttype != "CNAME":
                    out[(name, ttype)] = Answer(name, ttype, Outcome.RECORDS, tuple(tvalues),
                                                canonical_name=target)
            continue
        over = len(values) > MAX_RECORDS or any(len(v) > MAX_RECORD_CHARS for v in values)
        out[(name, rtype)] = Answer(name, rtype, Outcome.OVERSIZE if over else Outcome.RECORDS,
                                    () if over else tuple(values))
    return out


def _verdicts(zone: list[tuple[str, str, str]]) -> list[Any]:
    from hostile_dns import DOMAIN, INCLUDE, with_base
    from mailbox_actors.core.dns.checks import dmarc_query, mx_query
    from mailbox_actors.core.dns.results import MAX_MESSAGE

    table = _answers_from(with_base(zone))
    results = [check_mx(table.get(mx_query(DOMAIN)) or out(DOMAIN, Rtype.MX, Outcome.NXDOMAIN),
                        ["mx1.provider.net"])]
    plan = run_spf(table, DOMAIN, INCLUDE)
    assert plan.result is not None
    results.append(plan.result)
    dq = dkim_query(DOMAIN, "s1")
    assert dq is not None
    results.append(check_dkim(table.get(dq) or out(dq[0], Rtype.TXT, Outcome.NXDOMAIN), "s1",
                              None))
    dm = dmarc_query(DOMAIN)
    results.append(check_dmarc(table.get(dm) or out(dm[0], Rtype.TXT, Outcome.NXDOMAIN)))
    for r in results:
        assert r.code and r.message and len(r.message) <= MAX_MESSAGE
        # the corpus has no transient answers: unknown only where a macro hides the include
        assert r.verdict is not Verdict.UNKNOWN or r.code == "spf_include_unverifiable"
    return results


@pytest.mark.parametrize("case", sorted(__import__("hostile_dns").HAND_WRITTEN))
def test_hostile_zones_get_a_verdict_with_a_diagnosis(case: str) -> None:
    """DM-2: every hand-written hostile zone (loops of long names, chains over the limit, binary
    junk, macros, huge and many records, CNAME loops, junk tags) gets a pass or fail per record,
    each with a code and a message under the cap, never an exception."""
    from hostile_dns import HAND_WRITTEN

    _verdicts(HAND_WRITTEN[case])


def test_the_hostile_zones_fail_where_they_should() -> None:
    """DM-2: the corpus's deliberate faults are each diagnosed as such."""
    from hostile_dns import HAND_WRITTEN

    def code(case: str, record: str) -> str:
        return next(r.code for r in _verdicts(HAND_WRITTEN[case]) if r.record == record)

    assert code("spf_loop_of_long_names", "spf") == "spf_include_loop"
    assert code("spf_chain_over_the_limit", "spf") == "spf_too_many_lookups"
    assert code("spf_self_redirect", "spf") == "spf_include_loop"
    assert code("spf_two_records", "spf") == "spf_multiple"
    assert code("spf_huge_record", "spf") == "spf_too_large"
    assert code("spf_many_voids", "spf") == "spf_too_many_void_lookups"
    assert code("spf_macro_include", "spf") == "spf_include_unverifiable"
    assert code("mx_many_hosts", "mx") in ("mx_host_missing", "mx_too_large")
    assert code("mx_null_and_more", "mx") == "mx_null"
    assert code("dkim_huge_key", "dkim") == "dkim_too_large"
    assert code("dmarc_junk_tags", "dmarc") == "dmarc_ok"
    assert code("dmarc_lowercase_version", "dmarc") == "dmarc_ok"
    assert code("dmarc_policy_junk", "dmarc") == "dmarc_bad_policy"
    assert code("dmarc_many_records", "dmarc") == "dmarc_too_large"


def test_generated_hostile_zones_get_verdicts() -> None:
    """DM-2: 300 zones mutated from the corpus by seed 7 each get a verdict per record."""
    from hostile_dns import generated

    for _name, zone in generated(7, 300):
        _verdicts(zone)


@st.composite
def spf_trees_with_voids(draw: st.DrawFn) -> tuple[dict[Query, Answer], int, int]:
    """Include trees whose records also hold a/mx terms naming existing or void names, and
    sometimes a redirect (counted only without an all term)."""
    n = draw(st.integers(1, 5))
    names = [f"n{i}.net" for i in range(n)]
    zone: dict[Query, Answer] = {
        ("hit.net", Rtype.A): rec("hit.net", Rtype.A, "192.0.2.1"),
        ("hit.net", Rtype.AAAA): rec("hit.net", Rtype.AAAA),
        ("hit.net", Rtype.MX): rec("hit.net", Rtype.MX, "10 hit.net")}
    own: dict[str, tuple[int, int, list[str]]] = {}
    for i, name in enumerate(names):
        later = names[i + 1:]
        kids = draw(st.lists(st.sampled_from(later), max_size=2)) if later else []
        terms = [f"include:{k}" for k in kids]
        voids = lookups = 0
        for _ in range(draw(st.integers(0, 3))):
            kind, void = draw(st.sampled_from(["a", "mx"])), draw(st.booleans())
            terms.append(f"{kind}:{'void' if void else 'hit'}.net")
            lookups, voids = lookups + 1, voids + void
        has_all = draw(st.booleans())
        redirect = draw(st.sampled_from(later)) if later and draw(st.booleans()) else None
        terms = draw(st.permutations(terms)) + (["-all"] if has_all else [])
        if redirect is not None:
            terms.append(f"redirect={redirect}")
            if not has_all:
                kids = [*kids, redirect]
        zone[(name, Rtype.TXT)] = rec(name, Rtype.TXT, "v=spf1 " + " ".join(terms))
        own[name] = (lookups, voids, kids)

    def count(name: str) -> tuple[int, int]:
        lookups, voids, kids = own[name]
        for k in kids:
            kl, kv = count(k)
            lookups, voids = lookups + 1 + kl, voids + kv
        return lookups, voids
    lookups, voids = count(names[0])
    return zone, lookups, voids


@given(spf_trees_with_voids())
@no_deadline
def test_spf_lookups_and_void_lookups_match_a_reference_count(
        tree: tuple[dict[Query, Answer], int, int]) -> None:
    """DM-2 (RFC 7208 4.6.4): on generated trees of includes, redirects and a/mx terms naming
    existing or void names, the planner counts what a recursive reference counts and fails on
    exactly the limit that is exceeded."""
    zone, lookups, voids = tree
    plan = run_spf(zone, domain="n0.net", include=None)
    assert plan.result is not None
    if lookups <= MAX_LOOKUPS and voids <= 2:
        assert (plan.result.code, plan.lookups, plan.voids) == ("spf_ok", lookups, voids)
    elif voids <= 2:
        assert plan.result.code == "spf_too_many_lookups"
    elif lookups <= MAX_LOOKUPS:
        assert plan.result.code == "spf_too_many_void_lookups"
    else:
        assert plan.result.code in ("spf_too_many_lookups", "spf_too_many_void_lookups")
