"""The door's SMTP session (IN-5) reads MAIL and RCPT addresses exactly as aiosmtpd does: its
fast reading of a plain ``<local@domain>`` answers what aiosmtpd's own parser answers, for every
argument, hostile ones included (the address, the parameters after it, a refusal)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP
from hypothesis import given, settings
from hypothesis import strategies as st

from mailbox_actors.node.smtp_door import DoorSession


class _Handler:
    pass


@pytest.fixture(scope="module")
def sessions() -> tuple[SMTP, SMTP]:
    loop = asyncio.new_event_loop()
    try:
        return DoorSession(_Handler(), loop=loop), SMTP(_Handler(), loop=loop)
    finally:
        loop.close()


HAND_WRITTEN = [
    "<a@b.c>", "<a@b.c> SIZE=12", "<a@b.c>  SIZE=12 BODY=8BITMIME", "<a@b.c>\t SIZE=1",
    "<a@b.c> SIZE=1 ", "<a@b.c> \x0bSIZE=1", "<a@b.c>\x0bSIZE=1", "<a@b.c>x", "<a@b.c>>",
    "<a@b.c><x>", "<a@b.c>(comment) SIZE=1", "<a@b.c> (comment) SIZE=1", "<a@b.c> ",
    " <a@b.c>", "<a.b@c.d>", "<a..b@c.d>", "<.a@b.c>", "<a.@b.c>", "<>", "<> SIZE=1",
    "<A@B.C>", "<a@[1.2.3.4]>", "a@b.c", "a@b.c SIZE=1", '<"q"@b.c>', '<"a b"@c.d>',
    "<@x:a@b.c>", "<@x,@y:a@b.c>", "<a@b..c>", "<a@b.c.>", "<a@-b.c>", "<a@b>", "<a+b@c.d>",
    "<=?utf-8?q?x?=@b.c>", "<a@=?utf-8?q?b?=>", "<x=?y@b.c>", "<a@b_c.d>", "<a b@c.d>",
    "<a@b.c", "a@b.c>", "<a@@b.c>", "<@b.c>", "<a@>", "<ü@b.c>", "<a@bü.c>", "<a\\b@c.d>",
    "<a@b.c>\r\n", "<a@b.c>\x00", "<" + "x" * 300 + "@b.c>", "<a@" + "b." * 200 + "c>",
    "<o'hara{}|~@ex-ample.com> SIZE=99 SMTPUTF8", "<a@b.c> =?utf-8?q?x?=",
]


@pytest.mark.parametrize("arg", HAND_WRITTEN, ids=repr)
def test_hand_written_arguments_read_as_aiosmtpd_reads_them(
        sessions: tuple[SMTP, SMTP], arg: str) -> None:
    """IN-5: plain, parameterised, commented, quoted, routed, literal, encoded-word and broken
    addresses each give aiosmtpd's answer (address and parameters, or its refusal)."""
    door, stock = sessions
    assert door._getaddr(arg) == stock._getaddr(arg)


_ATEXT = "abcXYZ0189!#$%&'*+/=?^_`{|}~-"
_PIECES = st.sampled_from([*_ATEXT, ".", "@", "<", ">", " ", "\t", "(", ")", '"', "[", "]",
                           ":", ",", ";", "\\", "=?", "?=", "ü", "\x0b", "SIZE=1", "BODY=7BIT"])


@st.composite
def _arguments(draw: Any) -> str:
    """Mostly near-plain addresses with something changed: where a fast path could go wrong."""
    label = st.text(alphabet="abz09-", min_size=1, max_size=6)
    local = draw(st.lists(st.text(alphabet=_ATEXT, min_size=1, max_size=6), min_size=1,
                          max_size=3).map(".".join))
    domain = draw(st.lists(label, min_size=1, max_size=3).map(".".join))
    tail = draw(st.lists(_PIECES, max_size=6).map("".join))
    arg = f"<{local}@{domain}>{tail}"
    if draw(st.booleans()):
        at = draw(st.integers(min_value=0, max_value=len(arg)))
        arg = arg[:at] + draw(_PIECES) + arg[at:]
    return arg


@settings(max_examples=800, deadline=None)
@given(arg=_arguments())
def test_generated_arguments_read_as_aiosmtpd_reads_them(
        sessions: tuple[SMTP, SMTP], arg: str) -> None:
    """IN-5: over generated arguments, near-plain ones with one thing changed anywhere, the
    door's reading is aiosmtpd's."""
    door, stock = sessions
    assert door._getaddr(arg) == stock._getaddr(arg)


def test_a_local_part_limit_refuses_as_aiosmtpd_does() -> None:
    """IN-5: a session built with aiosmtpd's ``local_part_limit`` refuses a longer local part
    (malformed address), as stock aiosmtpd does."""
    loop = asyncio.new_event_loop()
    try:
        door = DoorSession(_Handler(), loop=loop)
        stock = SMTP(_Handler(), loop=loop)
    finally:
        loop.close()
    for s in (door, stock):
        s.local_part_limit = 4
    for arg in ("<abcd@b.c>", "<abcde@b.c> SIZE=1"):
        assert door._getaddr(arg) == stock._getaddr(arg)
