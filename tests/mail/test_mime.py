"""The message the SMTP transport builds reads back, with the standard library's parser, as the
email that was submitted (CA-8, CA-12): headers, Message-ID, text and html parts, non-ASCII text,
long lines and lists; no Bcc header; header injection refused."""

from __future__ import annotations

import time
from email import message_from_bytes, policy
from email.message import EmailMessage

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailbox_actors.platform.mail.mime import _boundary, build_message
from mailbox_actors.wire.transport import OutboundEmail


def parse(data: bytes) -> EmailMessage:
    msg = message_from_bytes(data, policy=policy.default)
    assert isinstance(msg, EmailMessage)
    assert not msg.defects
    return msg


def mail(**kw: object) -> OutboundEmail:
    fields: dict[str, object] = dict(email_id="eml_1", message_id_header="<m1@example.test>",
                                     from_="a@example.test", to=["b@example.test"], subject="Hi")
    fields.update(kw)
    return OutboundEmail(**fields)  # type: ignore[arg-type]


def body_of(msg: EmailMessage, kind: str) -> str:
    part = msg.get_body((kind,))
    assert part is not None
    content = part.get_content()
    assert isinstance(content, str)
    return content


@pytest.mark.parametrize("text", [
    "plain ascii\n", "Grüße, 世界 🙂\nsecond line\n", ".leading dot\n..two\n",
    "a" * 2000 + "\n", "mixed\r\nline\rends\n", "", "trailing spaces   \nand = signs\n",
])
def test_text_reads_back(text: str) -> None:
    """Any text body, ASCII or not, with long lines or odd line ends, reads back as sent (line
    ends normalized) (CA-8)."""
    data = build_message(mail(text=text))
    assert data.isascii()  # 7-bit clean for any relay
    assert all(len(line) <= 998 for line in data.split(b"\r\n"))
    want = text.replace("\r\n", "\n").replace("\r", "\n")
    got = body_of(parse(data), "plain").replace("\r\n", "\n")  # the wire's line ends
    assert got.rstrip("\n") == want.rstrip("\n")


def test_headers_and_alternative_parts() -> None:
    """From, To, Cc, Subject (RFC 2047 when not ASCII), Message-ID, Date and extra headers are
    there; Bcc and reserved names from the caller's headers are not; text and html are a
    multipart/alternative, text first (CA-8, CA-12)."""
    many = [f"user{i}@example.test" for i in range(40)]
    data = build_message(mail(to=many, cc=["c@example.test"], bcc=["hidden@example.test"],
                              subject="Résumé — " + "long " * 40, text="t", html="<p>h</p>",
                              headers={"X-Campaign": "7", "Bcc": "evil@example.test",
                                       "From": "forged@example.test"}), date_s=0)
    assert b"hidden@" not in data and b"evil@" not in data and b"forged@" not in data
    msg = parse(data)
    assert msg["From"] == "a@example.test"
    assert [a.addr_spec for a in msg["To"].addresses] == many
    assert msg["Cc"] == "c@example.test"
    assert msg["Subject"] == "Résumé — " + "long " * 40
    assert msg["Message-ID"] == "<m1@example.test>"
    assert msg["Date"].datetime.timestamp() == 0
    assert msg["X-Campaign"] == "7"
    assert msg.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    assert body_of(msg, "html").strip() == "<p>h</p>"


def test_html_only_and_empty() -> None:
    """An html-only email is a single text/html part; an email with neither is empty text (CA-8)."""
    msg = parse(build_message(mail(html="<b>x</b>")))
    assert msg.get_content_type() == "text/html"
    assert parse(build_message(mail())).get_content_type() == "text/plain"


def test_boundary_never_inside_a_body() -> None:
    """A body that contains the boundary the Message-ID would give gets a longer one (CA-8)."""
    taken = _boundary("<m1@example.test>", [])
    msg = parse(build_message(mail(text=f"--{taken}\n", html="<p>x</p>")))
    assert body_of(msg, "plain").strip() == f"--{taken}"


def test_utf8_addresses_use_raw_utf8_headers() -> None:
    """With an address outside ASCII (sent only with SMTPUTF8) headers are UTF-8 (RFC 6532) (CA-8)."""
    data = build_message(mail(to=["jürgen@example.test"], subject="Grüße"))
    msg = parse(data)
    assert msg["To"] == "jürgen@example.test" and msg["Subject"] == "Grüße"


@pytest.mark.parametrize("bad", [
    {"subject": "Hi\r\nBcc: x@example.test"}, {"headers": {"X-A": "1\nBcc: x@example.test"}},
    {"headers": {"Bad Name": "1"}}, {"headers": {"X:A": "1"}}, {"to": ["a@example.test\r\nX: y"]},
])
def test_header_injection_is_refused(bad: dict[str, object]) -> None:
    """CR or LF in a header value, or a header name that is not a field name, is refused (CA-8)."""
    with pytest.raises(ValueError):
        build_message(mail(**bad))


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
_LINE = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=120)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=_TEXT, html=st.none() | _TEXT, subject=_LINE, extra=_LINE)
def test_any_content_reads_back(text: str, html: str | None, subject: str, extra: str) -> None:
    """Whatever text, html, subject and header value a submit carries (hostile input included),
    the message is 7-bit clean with lines under 998 bytes and reads back with the same content
    (CA-8)."""
    data = build_message(mail(text=text, html=html, subject=subject, headers={"X-Extra": extra}))
    assert data.isascii()
    assert all(len(line) <= 998 for line in data.split(b"\r\n"))
    msg = message_from_bytes(data, policy=policy.default)
    assert isinstance(msg, EmailMessage)
    def words(s: object) -> str:  # header folding may change runs of white space, nothing else
        return " ".join(str(s).split())

    assert words(msg["Subject"]) == words(subject)
    assert words(msg["X-Extra"]) == words(extra)
    assert msg["Message-ID"] == "<m1@example.test>"

    def norm(s: str) -> str:
        return s.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")

    assert norm(body_of(msg, "plain")) == norm(text)
    if html is not None:
        assert norm(body_of(msg, "html")) == norm(html)


def test_control_characters_in_headers_are_encoded() -> None:
    """A control character in a header value is never written raw (it goes as an RFC 2047
    encoded word), so no relay sees a NUL or an escape in a header line (CA-8)."""
    data = build_message(mail(subject="a\x00b\x1bc"))
    head = data.split(b"\r\n\r\n", 1)[0]
    assert b"\x00" not in head and b"\x1b" not in head
    assert str(parse(data)["Subject"]) == "a\x00b\x1bc"


def test_date_is_the_time_of_the_build_to_the_second() -> None:
    """CA-8: without a fixed date, each message's Date is the second it was built in (the
    transport makes the text once a second and reuses it): messages built one after another
    carry a Date between the seconds before and after them, the later never before the earlier."""
    before = int(time.time())
    dates = [parse(build_message(mail()))["Date"].datetime.timestamp() for _ in range(50)]
    after = int(time.time())
    assert all(before <= d <= after for d in dates)
    assert dates == sorted(dates)
