"""Lenient parsing under caps (IN-1): good mail read right, hostile mail stored with defects,
never an exception."""

from __future__ import annotations

import base64

import pytest

from hostile_mail import HAND_WRITTEN, generated
from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.core.inbound.parse import parse_message

LIMITS = InboundLimits()

GOOD = (b"From: Alice <alice@example.com>\r\n"
        b"To: bob@example.com, =?utf-8?q?Carl?= <carl@example.com>\r\n"
        b"Cc: dora@example.com\r\n"
        b"Subject: =?utf-8?q?h=C3=A9llo?= world\r\n"
        b"Message-ID: <m1@example.com>\r\n"
        b"In-Reply-To: <m0@example.com>\r\n"
        b"References: <r@example.com>\r\n <m0@example.com>\r\n"
        b"Date: Tue, 01 Dec 2026 10:00:00 +0000\r\n"
        b'Content-Type: multipart/mixed; boundary="xx"\r\n\r\n'
        b'--xx\r\nContent-Type: multipart/alternative; boundary="yy"\r\n\r\n'
        b"--yy\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\ncaf=E9\r\n"
        b"--yy\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>caf\xc3\xa9</p>\r\n--yy--\r\n"
        b"--xx\r\nContent-Type: application/pdf\r\n"
        b'Content-Disposition: attachment; filename="r\xc3\xa9sum\xc3\xa9.pdf"\r\n'
        b"Content-Transfer-Encoding: base64\r\n\r\n" + base64.b64encode(b"%PDF-1.4 data")
        + b"\r\n--xx--\r\n")


def test_a_well_formed_message_is_read_whole() -> None:
    """IN-1, IN-3: addresses, subject (encoded-words decoded), ids, date, text and html in their
    charsets, and the attachment with its name, type, size and content."""
    p = parse_message(GOOD, LIMITS)
    assert p.defects == []
    assert p.from_addr == "alice@example.com"
    assert p.to == ["bob@example.com", "carl@example.com"] and p.cc == ["dora@example.com"]
    assert p.subject == "héllo world"
    assert p.message_id == "m1@example.com"
    assert p.in_reply_to == "<m0@example.com>"
    assert p.references is not None and "<r@example.com>" in p.references
    assert p.date_ms == 1_796_119_200_000
    assert p.text is not None and p.text.strip() == "café"
    assert p.html is not None and "café" in p.html
    [att] = p.attachments
    assert (att.filename, att.content_type, att.size) == ("résumé.pdf", "application/pdf", 13)
    assert att.content == b"%PDF-1.4 data"
    assert ("Subject", "héllo world") in p.headers


def test_long_content_type_values_are_read_but_not_kept_by_the_charset_cache() -> None:
    """IN-1: a text part's charset is read from a Content-Type value of any length (here 20 KB
    of junk parameters before charset=iso-8859-1); the process-wide cache of parsed values keeps
    only short ones, so hostile mail with distinct huge values cannot pin memory in it."""
    from mailbox_actors.core.inbound.mime import _charset_of

    before = _charset_of.cache_info().currsize
    for i in range(3):
        junk = "".join(f"; x{i}{n}=y" for n in range(2_000))
        raw = (b"From: a@example.com\r\nSubject: s\r\nContent-Type: text/plain" + junk.encode()
               + b"; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"
               b"caf=E9\r\n")
        assert (parse_message(raw, LIMITS).text or "").strip() == "caf\u00e9"
    assert _charset_of.cache_info().currsize == before


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_every_hand_written_hostile_message_parses_with_defects_not_errors(name: str) -> None:
    """IN-1: each hostile case parses without an exception, within every cap."""
    p = parse_message(HAND_WRITTEN[name], LIMITS)
    assert len(p.headers) <= LIMITS.max_headers
    assert all(len(v.encode("utf-8", "surrogatepass")) <= LIMITS.max_header_value_bytes
               for _, v in p.headers)
    assert p.text is None or len(p.text.encode("utf-8", "surrogatepass")) <= LIMITS.max_text_bytes
    assert all("\0" not in v for _, v in p.headers)
    assert p.text is None or "\0" not in p.text


def test_hostile_cases_name_what_they_broke() -> None:
    """IN-1: the defects say what was wrong or cut, case by case."""
    d = {name: parse_message(raw, LIMITS).defects for name, raw in HAND_WRITTEN.items()}
    assert "nul_bytes" in d["nul_bytes"]
    assert "header_8bit_undecodable:subject" in d["eight_bit_headers"]
    assert any(x.startswith("header_unreadable:") for x in d["bad_encoded_words"])
    assert "header_value_truncated:x-huge" in d["header_line_1mb"]
    assert "headers_truncated" in d["headers_10000"]
    assert "mime_too_complex" in d["multipart_1000_deep"]
    assert "message_id_invalid" in d["bad_message_id"]
    assert "date_invalid" in d["bad_date"]
    assert "thread_index_invalid" in d["bad_thread_index"]
    assert "charset_unknown" in d["bad_base64_and_charset"]
    assert any("Boundary" in x for x in d["boundary_never_closes"])


def test_an_unclosed_boundary_keeps_what_came_before_it() -> None:
    """IN-1: a multipart whose closing boundary never comes still yields its parts."""
    p = parse_message(HAND_WRITTEN["boundary_never_closes"], LIMITS)
    assert p.text is not None and "still going" in p.text
    assert [a.content_type for a in p.attachments] == ["application/pdf"]


def test_depth_and_part_caps_cut_without_failing() -> None:
    """IN-1: nesting deeper than max_mime_depth and parts beyond max_mime_parts are cut."""
    from hostile_mail import nested_multipart

    p = parse_message(nested_multipart(60), LIMITS)
    assert "mime_depth_exceeded" in p.defects and p.text is None
    p = parse_message(nested_multipart(60), InboundLimits(max_mime_parts=10))
    assert "mime_parts_truncated" in p.defects


def test_body_and_attachment_caps() -> None:
    """IN-1: text over max_text_bytes is cut; attachment content over max_attachment_bytes is
    listed with its size but not kept; attachments over max_attachments are not listed."""
    small = InboundLimits(max_text_bytes=4, max_attachment_bytes=5, max_attachments=1)
    p = parse_message(GOOD, small)
    assert p.text == "café"[:3] and "text_truncated" in p.defects
    [att] = p.attachments
    assert att.size == 13 and att.content is None
    assert "attachment_content_dropped" in p.defects


def test_header_caps_keep_the_first_fields() -> None:
    """IN-1: over max_headers or max_header_bytes the first fields are kept, in order."""
    p = parse_message(HAND_WRITTEN["headers_10000"], InboundLimits(max_headers=5))
    assert [n for n, _ in p.headers][:3] == ["From", "To", "X-H0"] and len(p.headers) == 5
    p = parse_message(HAND_WRITTEN["headers_10000"], InboundLimits(max_header_bytes=200))
    assert 1 <= len(p.headers) < 20 and "headers_truncated" in p.defects


@pytest.mark.parametrize("seed", range(4))
def test_generated_hostile_mail_never_raises(seed: int) -> None:
    """IN-1: 200 seeded mutations of the corpus per seed parse without an exception."""
    for _, raw in generated(seed, 200):
        p = parse_message(raw, LIMITS)
        assert isinstance(p.defects, list)


_SPLIT_CASES = [
    b"Subject: a\r\n  b\r\n\tc\r\nTo: x@y.z,\r\n w@y.z\r\nFrom: \"Q, R\" <q@r.s>\r\n\r\nbody\r\n",
    b"Subject: mixed\nX-A: 1\r\nX-B:\n\n\r\nbody with\rlone CR\n",
    b"X-Empty:\r\nX-Spaces:   \r\n\tfolded after spaces\r\nX-8: caf\xc3\xa9 \xff\r\n\r\n",
    b"X-Odd!#$%&'*+-.^_`|~: v\r\nFrom: a@b.c\r\n\r\n\r\nbody after a blank line\r\n",
    b"Subject: no body\r\n\r\n",
    b"Subject: x\r\nNot a header line\r\n\r\nbody",  # the feed parser records a defect
    b"\tcontinued first\r\nSubject: x\r\n\r\n",
    b"From sender Tue Dec  1 10:00:00 2026\r\nSubject: x\r\n\r\n",
    b"Subject: lone\rcr\r\n\r\n",
    b"\r\nSubject: in the body\r\n\r\n",
    b"Subject: headers only, no blank line\r\n",
    b"Content-Type: MESSAGE/rfc822\r\n\r\nSubject: inner\r\n\r\nx",
    b": no name\r\n\r\n",
]


@pytest.mark.parametrize("index", range(len(_SPLIT_CASES)))
def test_the_plain_split_reads_a_message_as_the_feed_parser_does(index: int) -> None:
    """IN-1: where the fast split of a one-part message answers, its header items, payload and
    defects are exactly the feed parser's; where the feed parser would record a defect or read
    parts, it leaves the message to the feed parser."""
    _same_as_feed_parser(_SPLIT_CASES[index])


def test_the_plain_split_agrees_with_the_feed_parser_over_the_hostile_corpus() -> None:
    """IN-1: every hand-written and generated hostile message the fast split accepts is split
    exactly as the feed parser splits it (header items, payload, defects); some are accepted."""
    corpus = [*HAND_WRITTEN.values(), *(raw for _, raw in generated(3, 300))]
    assert sum(_same_as_feed_parser(raw) for raw in corpus) > 20


def _same_as_feed_parser(raw: bytes) -> bool:
    from email import policy
    from email.parser import BytesParser

    from mailbox_actors.core.inbound.split import split_simple
    fast = split_simple(raw)
    if fast is None:
        return False
    full = BytesParser(policy=policy.compat32).parsebytes(raw)
    assert not full.is_multipart() and full.defects == [] and fast.defects == []
    assert list(fast.raw_items()) == list(full.raw_items())
    assert fast.get_payload() == full.get_payload()
    assert fast.get_unixfrom() is None and full.get_unixfrom() is None
    return True


def test_the_plain_body_reads_a_one_part_message_as_the_walk_does() -> None:
    """IN-1: where the direct read of a one-part plain-text body answers, its text and defects
    are exactly the MIME walk's (caps, charsets, 8-bit bytes, NULs); a part with a name, a
    disposition, a transfer encoding or another type is left to the walk. Over the hand-written
    and generated hostile corpus and the split cases, with tight caps too."""
    from mailbox_actors.core.inbound.mime import Body
    from mailbox_actors.core.inbound.split import split_fields, split_simple
    from mailbox_actors.core.inbound.text import Defects

    extra = [b"Subject: x\r\nContent-Type: text/plain; charset=latin-1\r\n\r\ncaf\xe9",
             b"Content-Type: text/plain; name=a.txt\r\n\r\nnamed",
             b"Content-Type: TEXT/PLAIN\r\nContent-Transfer-Encoding: BASE64\r\n\r\naGk=",
             b"Content-Type: text/html\r\n\r\n<p>hi</p>",
             b"Content-Type: nonsense\r\n\r\nread as text",
             b"Content-Disposition: attachment\r\n\r\nfile",
             b"Content-Type: text/plain; charset=no-such-set\r\n\r\nx\x00y\xff",
             b"Content-Transfer-Encoding: 8bit \r\n\r\n\xc3\xa9t\xc3\xa9"]
    corpus = [*HAND_WRITTEN.values(), *(raw for _, raw in generated(7, 300)), *_SPLIT_CASES,
              *extra]
    read = 0
    for lim in (InboundLimits(), InboundLimits(max_text_bytes=5)):
        for raw in corpus:
            split = split_fields(raw)
            if split is None:
                continue
            direct, walked = Body(lim, Defects()), Body(lim, Defects())
            if not direct.plain(split):
                continue
            walked.walk(split_simple(raw))
            read += 1
            assert (direct.text, direct.html, direct.attachments, list(direct.d.items)) == \
                (walked.text, walked.html, walked.attachments, list(walked.d.items))
    assert read > 20


def test_a_message_split_without_the_feed_parser_parses_as_the_feed_parser_reads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """IN-1: parse_message reads a one-part message from its split (header items and body bytes,
    no compat32 message built for a plain-text body) to exactly what it reads when the feed
    parser splits it: every field, text, attachment and defect, over the hand-written and
    generated hostile corpus and the split cases, with tight caps too; many take the split."""
    from mailbox_actors.core.inbound import parse, split

    corpus = [GOOD, *HAND_WRITTEN.values(), *(raw for _, raw in generated(11, 300)),
              *_SPLIT_CASES]
    taken = sum(split.split_fields(raw) is not None for raw in corpus)
    for lim in (LIMITS, InboundLimits(max_text_bytes=5, max_header_value_bytes=8)):
        fast = [parse_message(raw, lim) for raw in corpus]
        with monkeypatch.context() as m:
            m.setattr(parse, "split_fields", lambda raw: None)  # the feed parser for all
            slow = [parse_message(raw, lim) for raw in corpus]
        assert fast == slow
    assert taken > 50


def test_the_canonical_date_form_is_read_as_the_standard_library_reads_it() -> None:
    """IN-1: a Date read directly (``D Mon YYYY HH:MM[:SS] +HHMM``) gives the standard library's
    milliseconds, and every other value (two-digit years, named zones, ``-0000``, a day the month
    lacks, an offset past a day, junk) the standard library's answer or ``date_invalid``."""
    import email.utils
    import random

    from mailbox_actors.core.inbound.dates import date_ms
    from mailbox_actors.core.inbound.text import Defects

    rng = random.Random(5)
    days = ["Mon, ", "Tue, ", "Sun, ", "Xyz, ", "Tue,", ""]
    months = ["Jan", "Feb", "Jun", "Dec", "DEC", "dec", "Foo"]
    zones = ["+0000", "-0000", "+0100", "-0530", "+2359", "-2400", "+1260", "GMT", "EST", "+00"]
    for _ in range(5000):
        year = rng.choice([str(rng.randint(1900, 2100)), f"{rng.randint(0, 9999):04d}",
                           str(rng.randint(0, 99))])
        clock = f"{rng.randint(0, 25):02d}:{rng.randint(0, 61):02d}" + (
            f":{rng.randint(0, 61):02d}" if rng.random() < 0.8 else "")
        value = (f"{rng.choice(days)}{rng.randint(0, 32)} {rng.choice(months)} {year} {clock} "
                 f"{rng.choice(zones)}")
        try:
            expected: int | None = int(email.utils.parsedate_to_datetime(value).timestamp() * 1000)
        except Exception:
            expected = None
        d = Defects()
        assert date_ms(value, d) == expected, value
        assert list(d.items) == ([] if expected is not None else ["date_invalid"]), value
    assert date_ms("Tue, 01 Dec 2026 10:00:00 +0000", Defects()) == 1_796_119_200_000
