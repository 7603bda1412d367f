"""The door's SMTP session (IN-5) answers as stock aiosmtpd does: its reading of a plain
``<local@domain>`` in MAIL and RCPT gives what aiosmtpd's own parser gives, for every argument,
hostile ones included (the address, the parameters after it, a refusal); its DATA, read in
blocks, gives aiosmtpd's replies, content and refusals (500 line too long, 552 too much data),
and leaves in the stream exactly what aiosmtpd leaves (the next command), however the bytes
arrive; its one idle timer closes a connection once it has been idle for the timeout, as
aiosmtpd's timer re-armed at every command does, and not before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mailbox_actors.node.smtp_door_session import DoorSession


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


def _reading(session: SMTP, arg: str) -> object:
    """What ``_getaddr`` gives, or the class of what it raises: stock aiosmtpd's parser raises
    on some arguments (``<0000@[0>``: an AttributeError in the stdlib's address parser), and
    the door, which hands such arguments to it, must raise the same."""
    try:
        return session._getaddr(arg)
    except Exception as e:  # compared, not swallowed
        return type(e)


@settings(max_examples=800, deadline=None, derandomize=True)
@given(arg=_arguments())
@example(arg="<0000@[0>")
def test_generated_arguments_read_as_aiosmtpd_reads_them(
        sessions: tuple[SMTP, SMTP], arg: str) -> None:
    """IN-5: over generated arguments, near-plain ones with one thing changed anywhere, the
    door's reading is aiosmtpd's, a failure of aiosmtpd's own parser included (the same
    examples every run: derandomized)."""
    door, stock = sessions
    assert _reading(door, arg) == _reading(stock, arg)


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


# ---- DATA ---------------------------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Keeper:
    def __init__(self) -> None:
        self.content: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Envelope) -> str:
        self.content.append((envelope.content, envelope.original_content))
        return "250 2.0.0 Delivered"


async def _data(cls: type[SMTP], stream: bytes, piece: int, size_limit: int | None,
                ) -> tuple[list[bytes], list[Any], bytes]:
    """One DATA command on a session of ``cls`` reading ``stream`` as it arrives ``piece`` bytes
    at a time: its replies, what its handler was given, and what it left unread."""
    loop = asyncio.get_running_loop()
    keeper = _Keeper()
    s = cls(keeper, data_size_limit=size_limit, loop=loop)
    reader = asyncio.StreamReader(limit=s.line_length_limit, loop=loop)
    writer = _Writer()
    s._reader, s._writer = reader, writer  # type: ignore[assignment]
    s.transport = writer  # type: ignore[assignment]  # connected (aiosmtpd reads while it is)
    s.session = Session(loop)
    s.session.host_name = "client.example"
    s.envelope = Envelope()
    s.envelope.mail_from = "a@b.c"
    s.envelope.rcpt_tos = ["d@e.f"]

    async def feed() -> None:
        for at in range(0, len(stream), piece):
            reader.feed_data(stream[at:at + piece])
            await asyncio.sleep(0)  # a turn of the loop: the session reads what came so far
        reader.feed_eof()

    feeding = asyncio.create_task(feed())
    await s.smtp_DATA("")
    await feeding
    return writer.out, keeper.content, await reader.read()


_STREAMS = [
    b".\r\n", b"\r\n.\r\n", b"a\r\n.\r\n", b"..\r\n.\r\n", b"..x\r\n.x\r\n..\r\n.\r\n",
    b".a\r\nb\r\n.\r\n", b"a\n.\nb\r\n.\r\n", b"a\r.\r\n\r\n.\r\n", b"\r\r\n.\r\n",
    b"a\r\n.\rb\r\n.\r\n", b"a\r\n. \r\n.\r\n", b"\r\n\r\n\r\n.\r\n",
    b"From: x\r\n\r\nbody\r\n.\r\n",
    *(b"A" * n + b"\r\n.\r\n" for n in (997, 998, 999, 1000, 1001, 1002, 1003, 2000, 5000)),
    *(b"x\r\n" + b"A" * n + b".\r\n.\r\n" for n in (999, 1000, 1001, 1500)),
    b"A" * 3000 + b"\r\n" + b"B" * 20 + b"\r\n.\r\n",
    *(b"." + b"A" * n + b"\r\n.\r\n" for n in (998, 1000, 1001, 1002, 1500, 3000)),
    b"\r" + b"B" * 1500 + b"\r\n.\r\n", b"." + b"A" * 1200 + b".\r\n.\r\n",
    b"." + b"A" * 1002 + b".\r\n.\r\n", b"." + b"A" * 70 + b"\n.\r\n.\r\n", b"." * 1200 + b"\r\n.\r\n",
    b".\r" * 600 + b"\r\n.\r\n", b"\r\n" * 300 + b".\r\n", b"\r" * 1500 + b"\r\n.\r\n",
    (b"line of text\r\n" * 200) + b".\r\n",
    (b"line of text\r\n" * 50) + b"C" * 1200 + b"\r\n" + (b"x\r\n" * 50) + b".\r\n",
]
_AFTER = b"QUIT\r\n"


@pytest.mark.anyio
@pytest.mark.parametrize("size_limit", [None, 40, 3010], ids=lambda v: f"limit={v}")
@pytest.mark.parametrize("piece", [1, 2, 5, 1004, 1 << 20], ids=lambda v: f"piece={v}")
async def test_data_reads_as_aiosmtpd_reads_it(piece: int, size_limit: int | None) -> None:
    """IN-5: empty data, dot-stuffed lines, bare CR and LF, lines at and over the line limit
    (500), data over the size limit (552, or 500 when a long line came first), each arriving in
    pieces of 1 byte up to all at once: the door's replies, the content it hands on and the
    bytes it leaves for the next command are stock aiosmtpd's."""
    for stream in _STREAMS:
        door = await _data(DoorSession, stream + _AFTER, piece, size_limit)
        stock = await _data(SMTP, stream + _AFTER, piece, size_limit)
        assert door == stock, stream[:60]


_DATA_PIECES = st.sampled_from([b"\r", b"\n", b"\r\n", b".", b"..", b"a", b"b" * 7,
                                b"c" * 400, b"d" * 999, b"\r\n.\r", b"\r\n.", b"\x00", b"\xff"])


@pytest.mark.anyio
@settings(max_examples=200, deadline=None, derandomize=True)
@given(body=st.lists(_DATA_PIECES, max_size=12).map(b"".join),
       piece=st.sampled_from([1, 3, 8, 999, 1 << 20]),
       size_limit=st.sampled_from([None, 10, 500, 1500]))
async def test_generated_data_reads_as_aiosmtpd_reads_it(body: bytes, piece: int,
                                                         size_limit: int | None) -> None:
    """IN-5: over generated data (end-line look-alikes, CR and LF apart, long runs, NUL and 8-bit
    bytes), ended by an end line and followed by the next command, in pieces of any size: the
    door's answer, content and leftover are stock aiosmtpd's."""
    stream = body + b"\r\n.\r\n" + _AFTER
    assert await _data(DoorSession, stream, piece, size_limit) == \
        await _data(SMTP, stream, piece, size_limit)


# ---- the idle timeout ---------------------------------------------------------------------------


class _Timer:
    def __init__(self, when: float, callback: Any) -> None:
        self._when, self.callback, self._cancelled = when, callback, False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled


class _Clock:
    """The session's loop as far as its idle timer uses it: a time set by the test, and the
    timers asked for (the test runs the one due)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[_Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any) -> _Timer:
        self.timers.append(_Timer(when, callback))
        return self.timers[-1]

    def armed(self) -> list[_Timer]:
        return [t for t in self.timers if not t.cancelled()]

    def fire_at(self, now: float) -> None:
        """Time moves to ``now``; the armed timer runs (it must be due)."""
        self.now = now
        (timer,) = self.armed()
        assert timer.when() <= now
        timer.cancel()  # ran: no longer armed
        timer.callback()


class _Transport:
    def __init__(self) -> None:
        self.closed_at: float | None = None
        self.clock: _Clock | None = None

    def close(self) -> None:
        assert self.clock is not None
        self.closed_at = self.clock.now


def _timed_session(clock: _Clock, timeout: float) -> tuple[DoorSession, _Transport]:
    loop = asyncio.new_event_loop()
    try:
        s = DoorSession(_Handler(), loop=loop, timeout=timeout)
    finally:
        loop.close()
    s.loop = clock  # type: ignore[assignment]
    s.session = Session(loop)
    transport = _Transport()
    transport.clock = clock
    s.transport = transport  # type: ignore[assignment]
    return s, transport


def test_the_idle_timeout_closes_a_connection_idle_for_the_timeout_and_not_before() -> None:
    """IN-5: commands at 0, 10, 20 and 30 s with a 60 s timeout keep one timer armed (not one a
    command); it fires at 60 s, finds the connection busy 30 s ago and waits until 90 s, where
    the connection, idle for 60 s, is closed."""
    clock = _Clock()
    s, transport = _timed_session(clock, 60)
    for t in (0.0, 10.0, 20.0, 30.0):
        clock.now = t
        s._reset_timeout()
    assert len(clock.timers) == 1
    clock.fire_at(60.0)
    assert transport.closed_at is None
    assert [t.when() for t in clock.armed()] == [90.0]
    clock.fire_at(90.0)
    assert transport.closed_at == 90.0
    assert clock.armed() == []


def test_a_shorter_timeout_moves_the_timer_earlier() -> None:
    """IN-5: a reset for a shorter time than the armed timer's (aiosmtpd's PROXY handshake
    timeout) re-arms it for the earlier deadline, which closes the connection then."""
    clock = _Clock()
    s, transport = _timed_session(clock, 60)
    s._reset_timeout()
    clock.now = 1.0
    s._reset_timeout(5)
    assert [t.when() for t in clock.armed()] == [6.0]
    clock.fire_at(6.0)
    assert transport.closed_at == 6.0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_junk_commands_on_over_long_lines_leave_the_line_limits_as_they_were() -> None:
    """IN-5, hostile input is capped (review s23 R1): after EHLO, 2,000 distinct junk command
    names each on a line past the limit are each answered ``500 Command line too long``, and
    the session's line limits hold only what EHLO raised (MAIL's), not a key a junk name;
    aiosmtpd's process-wide mapping is not grown either. Real sockets on loopback."""
    loop = asyncio.get_running_loop()
    made: list[DoorSession] = []

    def session() -> DoorSession:
        made.append(DoorSession(_Handler(), loop=loop))
        return made[-1]

    before = len(SMTP.command_size_limits)
    server = await loop.create_server(session, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await reader.readline()  # the greeting
        writer.write(b"EHLO client.example\r\n")
        while not (await reader.readline()).startswith(b"250 "):
            pass
        n = 2_000
        writer.write(b"".join(b"Z%07d %s\r\n" % (i, b"A" * 900) for i in range(n)))
        replies = [await reader.readline() for _ in range(n)]
        assert set(replies) == {b"500 Command line too long\r\n"}
        writer.write(b"NOOP\r\n")
        assert await reader.readline() == b"250 OK\r\n"  # the session still serves
        writer.write(b"QUIT\r\n")
        await reader.readline()
        writer.close()
        await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
    assert sorted(made[0].command_size_limits) == ["MAIL"]
    assert len(SMTP.command_size_limits) == before
