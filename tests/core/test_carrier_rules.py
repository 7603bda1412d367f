"""Carrier's pure rules (core.carrier): statuses and transitions, the replay digest, addresses and
headers, the per-recipient cap, rejection classes and the retry budget. No I/O."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailbox_actors.core.carrier.addresses import (
    MAX_HEADERS,
    address_problem,
    header_problem,
    headers_problem,
    normalize,
    text_problem,
)
from mailbox_actors.core.carrier.cap import CapPolicy, over_cap, window_start
from mailbox_actors.core.carrier.digest import content_digest
from mailbox_actors.core.carrier.rejections import (
    CLOUDFLARE_CODES,
    RETRY_BUDGET,
    cloudflare_class,
    smtp_class,
    temporary_retry_at,
)
from mailbox_actors.core.carrier.states import (
    COUNTED_BY_CAP,
    TERMINAL,
    TRANSITIONS,
    EmailStatus,
    MessageStatus,
    can_move,
    delivery_moves,
)

no_deadline = settings(deadline=None)
S = EmailStatus
M = MessageStatus

# -- statuses ------------------------------------------------------------------------------------


def test_the_eight_statuses_and_their_moves() -> None:
    """CA-3, CA-4: exactly the eight statuses; dispatch intent comes before any provider outcome;
    outcome_unknown is never put back in the queue (only an operator's resolve settles it); the
    other terminal statuses never move."""
    assert {s.value for s in S} == {"queued", "dispatching", "provider_accepted",
                                    "outcome_unknown", "rejected", "refused", "expired",
                                    "superseded"}
    assert can_move(S.QUEUED, S.DISPATCHING)
    assert not can_move(S.QUEUED, S.PROVIDER_ACCEPTED)  # never accepted without intent
    assert can_move(S.DISPATCHING, S.QUEUED)  # a temporary rejection
    assert not can_move(S.OUTCOME_UNKNOWN, S.QUEUED)
    assert not can_move(S.OUTCOME_UNKNOWN, S.DISPATCHING)
    assert TRANSITIONS[S.OUTCOME_UNKNOWN] == {S.PROVIDER_ACCEPTED, S.REJECTED}
    for s in (S.PROVIDER_ACCEPTED, S.REJECTED, S.REFUSED, S.EXPIRED, S.SUPERSEDED):
        assert not TRANSITIONS[s]
    # Expiry and supersession happen before intent only.
    assert not can_move(S.DISPATCHING, S.EXPIRED) and not can_move(S.DISPATCHING, S.SUPERSEDED)
    assert TERMINAL == set(S) - {S.QUEUED, S.DISPATCHING}


def test_the_cap_counts_what_may_have_reached_the_provider() -> None:
    """CA-6: refused, rejected, expired and superseded Emails do not count toward the cap."""
    assert COUNTED_BY_CAP == {S.QUEUED, S.DISPATCHING, S.PROVIDER_ACCEPTED, S.OUTCOME_UNKNOWN}


def test_delivery_state_only_moves_forward() -> None:
    """CA-13: deferred after delivered changes nothing; delivered, bounced hard and complained
    are terminal; a soft bounce can still become delivered."""
    assert delivery_moves(M.UNCONFIRMED, M.DEFERRED)
    assert delivery_moves(M.DEFERRED, M.DELIVERED)
    assert delivery_moves(M.BOUNCED_SOFT, M.DELIVERED)
    assert delivery_moves(M.UNKNOWN, M.DELIVERED)
    assert not delivery_moves(M.DELIVERED, M.DEFERRED)
    for terminal in (M.DELIVERED, M.BOUNCED_HARD, M.COMPLAINED):
        for news in (M.DEFERRED, M.BOUNCED_SOFT, M.DELIVERED, M.BOUNCED_HARD, M.COMPLAINED):
            assert not delivery_moves(terminal, news)
    assert not delivery_moves(M.DEFERRED, M.DEFERRED)
    for never_sent in (M.QUEUED, M.NOT_SENT, M.REFUSED):
        assert not delivery_moves(never_sent, M.DELIVERED)


# -- replay digest -------------------------------------------------------------------------------

BASE = dict(from_="a@example.com", to=["b@example.com"], cc=[], bcc=[], subject="s", text="t",
            html=None, headers={"X-A": "1"}, send_before=None)


def test_digest_of_a_given_email_never_changes() -> None:
    """CA-2: the digest is what a stored Email's replays are compared by, so the same content
    gives the same digest in every version (two pinned values)."""
    assert content_digest(
        from_="a@example.com", to=["b@example.com", "c@example.com"], cc=["d@example.com"],
        bcc=[], subject="Hi \u00e9", text="body\n", html=None,
        headers={"X-Tag": "v", "In-Reply-To": "<x@y>"}, send_before=1767225600000,
    ) == "77b87333c22c3f9ce166d471739f011a6dc6b66c3973dc21ad0d6c1335361a16"
    assert content_digest(
        from_="a@example.com", to=["b@example.com"], cc=[], bcc=["e@example.com"], subject="",
        text=None, html="<p>h</p>", headers={}, send_before=None,
    ) == "196611949de779e17b29459fa5b1a8614918cf6440a89cc8451d5d2e89600fde"


def test_digest_covers_content_envelope_headers_and_expiry() -> None:
    """CA-2: changing content, envelope, headers or expiry changes the digest; header names'
    case and order do not."""
    d = content_digest(**BASE)  # type: ignore[arg-type]
    assert d == content_digest(**BASE)  # type: ignore[arg-type]
    for change in ({"text": "u"}, {"html": "<p>"}, {"subject": "x"}, {"from_": "c@example.com"},
                   {"to": ["c@example.com"]}, {"cc": ["b@example.com"]}, {"bcc": ["d@e.f"]},
                   {"headers": {"X-A": "2"}}, {"headers": {}}, {"send_before": 1}):
        assert content_digest(**(BASE | change)) != d, change  # type: ignore[arg-type]
    assert content_digest(**(BASE | {"headers": {"x-a": "1"}})) == d  # type: ignore[arg-type]
    two = {"X-A": "1", "X-B": "2"}
    assert (content_digest(**(BASE | {"headers": two}))  # type: ignore[arg-type]
            == content_digest(**(BASE | {"headers": dict(reversed(two.items()))})))  # type: ignore[arg-type]
    # Moving a recipient from to to cc is another envelope.
    assert (content_digest(**(BASE | {"to": [], "cc": ["b@example.com"]}))  # type: ignore[arg-type]
            != d)


@no_deadline
@given(st.text(max_size=40), st.text(max_size=40))
def test_digest_tells_any_two_texts_apart(a: str, b: str) -> None:
    """CA-2: two different bodies never share a digest (the encoding is unambiguous)."""
    da = content_digest(**(BASE | {"text": a}))  # type: ignore[arg-type]
    db = content_digest(**(BASE | {"text": b}))  # type: ignore[arg-type]
    assert (da == db) == (a == b)


# -- addresses and headers -----------------------------------------------------------------------

GOOD = ["a@example.com", "first.last@sub.example.org", "x+tag@example.com", "o'neil@example.ie",
        '"quoted local"@example.com', "user@[192.0.2.1]", "u@localhost", "ünï@exämple.de"]
BAD = ["", "plain", "@example.com", "a@", "a@@example.com", "Name <a@example.com>",
       "a@example.com\r\nBcc: x@y.z", "a b@example.com", "a..b@example.com", ".a@example.com",
       "a@example..com", "a@example.com (comment)", "a\0@example.com", "x" * 65 + "@example.com",
       "a@" + "d" * 260]


@pytest.mark.parametrize("address", GOOD)
def test_addr_specs_are_accepted(address: str) -> None:
    """CA-1: RFC 5322 addr-specs (dot-atom, quoted local part, domain literal, UTF-8 atoms)."""
    assert address_problem(address) is None


@pytest.mark.parametrize("address", BAD)
def test_what_is_not_an_addr_spec_is_refused(address: str) -> None:
    """CA-1: display names, comments, CR/LF, empty parts and over-long parts are refused, with a
    reason that never quotes the address."""
    problem = address_problem(address)
    assert problem is not None
    assert address not in problem or address == ""


ATOM = st.text(string.ascii_letters + string.digits + "!#$%&'*+/=?^_`{|}~-", min_size=1,
               max_size=10)


@no_deadline
@given(st.lists(ATOM, min_size=1, max_size=3), st.lists(ATOM, min_size=1, max_size=3))
def test_any_dot_atom_address_is_accepted(local: list[str], domain: list[str]) -> None:
    """CA-1: every dot-atom@dot-atom within the lengths is an addr-spec."""
    assert address_problem(".".join(local) + "@" + ".".join(domain)) is None


@no_deadline
@given(st.text(max_size=60))
def test_no_accepted_address_carries_a_line_break_or_angle_bracket(text: str) -> None:
    """CA-1: whatever the input, an accepted address has no CR, LF, NUL, space outside quotes or
    display-name brackets (so it cannot inject an SMTP command or a header)."""
    if address_problem(text) is None:
        assert not any(c in text for c in "\r\n\0<>")
        assert "@" in text


@no_deadline
@given(st.text(max_size=40))
def test_normalize_is_trimmed_lowercase_and_idempotent(text: str) -> None:
    """CA-6: the cap's key is the address trimmed and lower-cased."""
    n = normalize(text)
    assert n == text.strip().lower()
    assert normalize(n) == n
    assert normalize("  Bob@Example.COM ") == "bob@example.com"


def test_header_rules_follow_the_cloudflare_style_send() -> None:
    """CA-5: platform headers are E_HEADER_NOT_ALLOWED, request fields E_HEADER_USE_API_FIELD,
    unknown names without X- not allowed, CR/LF E_HEADER_VALUE_INVALID, long values and too many
    or too large headers their own codes; whitelisted and X- headers pass."""
    assert header_problem("X-Campaign", "7") is None
    assert header_problem("List-Unsubscribe", "<https://example.com/u>") is None
    assert header_problem("In-Reply-To", "<a@b>") is None
    assert header_problem("Message-ID", "<x@y>")[0] == "E_HEADER_NOT_ALLOWED"  # type: ignore[index]
    assert header_problem("ARC-Seal", "x")[0] == "E_HEADER_NOT_ALLOWED"  # type: ignore[index]
    assert header_problem("DKIM-Signature", "x")[0] == "E_HEADER_NOT_ALLOWED"  # type: ignore[index]
    assert header_problem("Bcc", "x@y.z")[0] == "E_HEADER_USE_API_FIELD"  # type: ignore[index]
    assert header_problem("reply-to", "x@y.z")[0] == "E_HEADER_USE_API_FIELD"  # type: ignore[index]
    assert header_problem("Sender", "x")[0] == "E_HEADER_NOT_ALLOWED"  # type: ignore[index]
    assert header_problem("X-A", "1\r\nBcc: v@x.y")[0] == "E_HEADER_VALUE_INVALID"  # type: ignore[index]
    assert header_problem("X-A", "v" * 999)[0] == "E_HEADER_VALUE_TOO_LONG"  # type: ignore[index]
    assert header_problem("X A", "1")[0] == "E_HEADER_NAME_INVALID"  # type: ignore[index]
    assert header_problem("X:A", "1")[0] == "E_HEADER_NAME_INVALID"  # type: ignore[index]
    many = {f"X-{i}": "v" for i in range(MAX_HEADERS + 1)}
    assert headers_problem(many)[0] == "E_HEADERS_TOO_MANY"  # type: ignore[index]
    big = {f"X-{i}": "v" * 990 for i in range(17)}
    assert headers_problem(big)[0] == "E_HEADERS_TOO_LARGE"  # type: ignore[index]
    assert headers_problem({"X-A": "1", "x-a": "2"}) is not None
    assert headers_problem({"X-A": "1"}) is None


@no_deadline
@given(st.text(max_size=30))
def test_no_header_value_or_subject_with_a_line_break_passes(value: str) -> None:
    """CA-1: a subject or header value with CR or LF (header injection) is always refused."""
    if "\r" in value or "\n" in value:
        assert text_problem(value) is not None
        assert header_problem("X-A", value) is not None


# -- cap -----------------------------------------------------------------------------------------


def test_cap_refuses_exactly_past_the_limit() -> None:
    """CA-6: with limit N, the Email that would be the (N+1)-th for an address is over the cap;
    one Email naming an address twice counts once."""
    p = CapPolicy(limit=2, window_ms=1000)
    assert over_cap(p, ["a", "b"], {"a": 1}) == []
    assert over_cap(p, ["a", "b", "a"], {"a": 2}) == ["a"]
    assert over_cap(p, ["a", "a"], {"a": 1}) == []
    assert window_start(p, 5000) == 4000


# -- rejections ----------------------------------------------------------------------------------


def test_cloudflare_code_table() -> None:
    """CA-5: the three temporary codes, the sixteen permanent ones, and E_DELIVERY_FAILED,
    unknown codes and a missing code as not documented (outcome_unknown)."""
    assert {c for c, k in CLOUDFLARE_CODES.items() if k == "temporary"} == {
        "E_RATE_LIMIT_EXCEEDED", "E_DAILY_LIMIT_EXCEEDED", "E_INTERNAL_SERVER_ERROR"}
    assert sum(1 for k in CLOUDFLARE_CODES.values() if k == "permanent") == 16
    assert cloudflare_class("E_SENDER_NOT_VERIFIED") == "permanent"
    assert cloudflare_class("E_HEADERS_TOO_MANY") == "permanent"
    assert cloudflare_class("E_DELIVERY_FAILED") is None
    assert cloudflare_class("E_SOMETHING_NEW") is None
    assert cloudflare_class(None) is None


def test_smtp_reply_classes() -> None:
    """CA-11: 4yz temporary, 5yz permanent, anything else not a refusal."""
    assert smtp_class(421) == smtp_class(451) == "temporary"
    assert smtp_class(550) == smtp_class(554) == "permanent"
    assert smtp_class(250) is None and smtp_class(354) is None


@no_deadline
@given(st.floats(min_value=0, max_value=0.999999))
def test_temporary_retries_back_off_until_the_budget_is_spent(u: float) -> None:
    """CA-5: each temporary rejection waits longer (exponentially, capped), and after the
    budget's last definite rejection there is no retry."""
    now = 1_000_000
    delays = [temporary_retry_at(n, now, u) for n in range(1, RETRY_BUDGET)]
    assert all(d is not None and d > now for d in delays)
    base = [temporary_retry_at(n, now, 0.0) for n in range(1, 6)]
    assert base == sorted(base) and len(set(base)) == len(base)
    assert temporary_retry_at(RETRY_BUDGET, now, u) is None


def test_every_code_point_is_an_atom_or_quoted_character_exactly_as_rfc_5322_and_6532_say() -> None:
    """CA-1: a one-character local part is accepted exactly when the character is RFC 5322 atext or
    any non-ASCII code point (RFC 6532), and a quoted one exactly when it is qtext or non-ASCII or
    an escaped printable ASCII character; checked on every code point up to U+00FF and on a spread
    of the rest up to U+10FFFF (surrogates, which no wire string carries, aside), so the pattern's
    spelling cannot change what is accepted."""
    atext = set(string.ascii_letters + string.digits + "!#$%&'*+-/=?^_`{|}~")
    qtext = {chr(c) for c in range(0x20, 0x7F)} - {'"', "\\"}
    for c in [*range(0x100), *range(0x100, 0x110000, 251), 0xFFFF, 0x10000, 0x10FFFF]:
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        assert (address_problem(f"{ch}@example.com") is None) == (ch in atext or c >= 0x80), c
        assert (address_problem(f'"{ch}"@example.com') is None) == (ch in qtext or c >= 0x80), c
    for c in range(0x20, 0x7F):
        assert address_problem(f'"\\{chr(c)}"@example.com') is None, c
