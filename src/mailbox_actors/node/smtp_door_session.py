"""The door's SMTP session (IN-5): aiosmtpd's ``SMTP``, answering every command as it does, with
three of its per-message costs taken off: the addresses of MAIL and RCPT, the idle timer, and
the DATA lines.

- aiosmtpd reads every address with the email package's header parser, about 70 us each (two a
  message, a quarter of the session's CPU). A plain ``<local@domain>`` (a dot-atom local part, a
  domain of letters, digits and hyphens, no encoded-word syntax) reads the same with one regex;
  anything else (quotes, comments, routes, literals, 8-bit) goes to aiosmtpd's reading.
- aiosmtpd re-arms its idle timer for every command (a cancelled timer and a new one); here
  one timer stays armed and is set again for the idle deadline when it fires early.
- aiosmtpd reads DATA a line at a time (one ``readuntil`` and a debug log call a line, about
  30 us for a short message). This session reads up to the end line in blocks and then judges
  the lines as aiosmtpd would have while reading them: a line over ``line_length_limit``
  (500), more than ``data_size_limit`` bytes (552, whichever came first), else the content
  with its dots unstuffed. It never reads past the end line (what follows belongs to the next
  command) and keeps at most the size limit (and a line) of a message it will refuse.

It also tells its handler when an envelope ends (``envelope_ends(envelope)``, if the handler has
one: after DATA, RSET, HELO or EHLO, or when the connection goes), which the door uses to know
which messages are still on their way to a mailbox.

The addresses and DATA are tested equal to stock aiosmtpd, replies and content, over
hand-written and generated input sent in pieces of every size; the timer, to close a connection
when it has been idle for the timeout and not before. The benchmark's no-op yardstick is stock
aiosmtpd.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiosmtpd.smtp import MISSING, SMTP, syntax

__all__ = ["DoorSession", "smtp_server"]

# RFC 5322's atext; a plain "<local@domain>" as aiosmtpd's parser reads it, character for character.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_PLAIN_ANGLE = re.compile(rf"<({_ATEXT}+(?:\.{_ATEXT}+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)>")
_END = b"\r\n.\r\n"  # the end line, with the line end before it
_NOMINAL, _TOO_LONG, _TOO_MUCH = "nominal", "too_long", "too_much"


def _verdict(data: bytes, size_limit: int | None, line_limit: int) -> str:
    """What aiosmtpd decides reading ``data`` (lines with their CRLF; the last may be cut off)
    a line at a time: a line its reader cannot hold (over ``line_limit`` before its CRLF) is too
    long before it is counted; others are counted, checked against the size, then the length."""
    lines = data.split(b"\r\n")
    if not lines[-1]:
        lines.pop()  # the end of the last line, or no data
    if (not size_limit or len(data) <= size_limit) and \
            max(map(len, lines), default=0) + 2 <= line_limit:
        return _NOMINAL
    count = 0
    for line in lines:
        if len(line) > line_limit:
            return _TOO_LONG
        count += len(line) + 2
        if size_limit and count > size_limit:
            return _TOO_MUCH
        if len(line) + 2 > line_limit:
            return _TOO_LONG
    return _NOMINAL


def _unstuffed(data: bytes) -> bytes:
    """RFC 5321 4.5.2: one leading dot off every line that has one."""
    if data[:1] == b".":
        data = data[1:]  # the first line; it cannot have been a lone dot (the end line)
    return data.replace(b"\r\n.", b"\r\n") if b"\r\n." in data else data


class _LineLimits(dict[str, int]):
    """A session's longest command line by command name, as aiosmtpd keeps it (EHLO raises
    MAIL's for SIZE and SMTPUTF8), one mapping a session; a name never raised reads the default
    without being added. aiosmtpd's own is one ``defaultdict`` for every session of the process,
    which adds each command name a client sends on a line past the limit, junk ones too: one
    connection grew it by about 1 KB a line for as long as it stayed (review s23 R1)."""

    __slots__ = ()

    def __missing__(self, command: str) -> int:
        return SMTP.command_size_limit


class DoorSession(SMTP):
    """aiosmtpd's session with plain addresses, DATA and the idle timeout done cheaply (module
    docstring), and line limits of its own (``_LineLimits``)."""

    _idle_deadline: float = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.command_size_limits = _LineLimits()  # before aiosmtpd's __init__ clears it
        super().__init__(*args, **kwargs)

    def _reset_timeout(self, duration: float | None = None) -> None:
        # aiosmtpd cancels its idle timer and schedules a new one for every command (3 us each,
        # and the loop sweeps the cancelled timers later). Here the timer stays armed; when it
        # fires before the idle deadline it is set again for the deadline, so a connection still
        # closes once it has been idle for the timeout, as in aiosmtpd.
        deadline = self.loop.time() + (duration or self._timeout_duration)
        self._idle_deadline = deadline
        handle = self._timeout_handle
        if handle is None or handle.cancelled() or handle.when() > deadline:
            if handle is not None:
                handle.cancel()
            self._timeout_handle = self.loop.call_at(deadline, self._idle_check)

    def _idle_check(self) -> None:
        if self.loop.time() < self._idle_deadline:  # a command came since the timer was set
            self._timeout_handle = self.loop.call_at(self._idle_deadline, self._idle_check)
            return
        self._timeout_cb()  # type: ignore[no-untyped-call]  # aiosmtpd's: log, close

    def _set_post_data_state(self) -> None:
        # Every envelope's end goes through here (after DATA, RSET, HELO, EHLO): the handler
        # learns that its messages are no longer on their way (the door's batches wait for them).
        self._envelope_ends()
        super()._set_post_data_state()  # type: ignore[no-untyped-call]

    def connection_lost(self, error: Exception | None) -> None:
        self._envelope_ends()
        super().connection_lost(error)

    def _envelope_ends(self) -> None:
        ends = getattr(self.event_handler, "envelope_ends", None)
        if ends is not None and self.envelope is not None:
            ends(self.envelope)

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        m = _PLAIN_ANGLE.match(arg)
        if m is None or "=?" in m.group(1):
            return super()._getaddr(arg)
        rest = arg[m.end():]
        if rest[:1] in (" ", "\t"):
            rest = rest.lstrip()  # the parser's folding white space: str.lstrip()'s set
        if rest[:1] == "(":  # a comment: the parser's to skip
            return super()._getaddr(arg)
        addr = m.group(1)
        if self.local_part_limit and len(addr.rpartition("@")[0]) > self.local_part_limit:
            return None, None
        return addr, rest

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:
        if self._decode_data or "DATA" not in self._handle_hooks:
            await super().smtp_DATA(arg)  # a str content, or the old process_message hook
            return
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        assert self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push("503 Error: need RCPT command")
            return
        if arg:
            await self.push("501 Syntax: DATA")
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        try:
            data, state = await self._read_data()
        except asyncio.CancelledError:
            self._writer.close()  # the connection went while the data came
            raise
        if state is not _NOMINAL:
            await self.push("500 Line too long (see RFC5321 4.5.3.1.6)" if state is _TOO_LONG
                            else "552 Error: Too much mail data")
            self._set_post_data_state()
            return
        self.envelope.content = self.envelope.original_content = _unstuffed(data)
        status = await self._call_handler_hook("DATA")
        self._set_post_data_state()
        await self.push("250 OK" if status is MISSING else status)

    async def _read_data(self) -> tuple[bytes, str]:
        """The lines before the end line, as sent, and aiosmtpd's verdict on them."""
        reader = self._reader
        size_limit = self.data_size_limit
        line_limit = self.line_length_limit
        kept = _Kept(size_limit, line_limit)
        while True:
            # At a line start. Only "." (the end line itself) or CR (an empty line, then maybe
            # the end line) can begin the end line here: such a line is read alone; after any
            # other byte nothing read could begin it, so a block up to the next end line is
            # read, and the reader keeps the bytes an end line could begin in when it stops
            # short (a line longer than its limit).
            first = await reader.readexactly(1)
            if first in (b".", b"\r"):
                line, whole = first, True
                while not line.endswith(b"\r\n"):
                    try:
                        piece = await reader.readuntil(b"\n")
                    except asyncio.LimitOverrunError as e:
                        piece = await reader.readexactly(e.consumed)
                    if len(line) > 64:  # not the end line: kept as it comes, but for its last
                        kept.add(line[:-1])  # byte, which may begin its CRLF
                        line, whole = line[-1:], False
                    line += piece
                if whole and line == b".\r\n":
                    return kept.result()
                kept.add(line)
                continue
            kept.add(first)
            while True:
                try:
                    kept.add(await reader.readuntil(_END))
                    return kept.result(end_line=True)
                except asyncio.LimitOverrunError as e:
                    kept.add(await reader.readexactly(e.consumed))


class _Kept:
    """The data read so far (up to a size limit's worth), and the verdict on it."""

    __slots__ = ("line_limit", "parts", "size", "size_limit", "state")

    def __init__(self, size_limit: int | None, line_limit: int) -> None:
        self.size_limit = size_limit
        self.line_limit = line_limit
        self.parts: list[bytes] = []
        self.size = 0
        self.state: str | None = None  # decided early only for data too large to keep

    def add(self, piece: bytes) -> None:
        if self.state is not None:
            return  # judged: the rest is only read
        self.parts.append(piece)
        self.size += len(piece)
        # Past the size limit by two lines' worth, the verdict cannot change (the line that
        # crossed the limit is whole, or it is a line too long for the reader): judge now and
        # keep no more, as aiosmtpd keeps nothing of data it will refuse.
        if self.size_limit and self.size > self.size_limit + 2 * self.line_limit + 8:
            verdict = _verdict(b"".join(self.parts), self.size_limit, self.line_limit)
            self.state = _TOO_MUCH if verdict is _NOMINAL else verdict
            self.parts = []

    def result(self, end_line: bool = False) -> tuple[bytes, str]:
        """The data and the verdict; ``end_line``: the last piece ends with the end line."""
        if self.state is not None:
            return b"", self.state
        data = b"".join(self.parts)
        if end_line:
            data = data[:-3]  # its ".\r\n"; the CRLF before it ends the last line
        return data, _verdict(data, self.size_limit, self.line_limit)


def smtp_server(handler: Any, *, max_message_bytes: int, hostname: str,
                session: type[SMTP] = SMTP) -> SMTP:
    """The aiosmtpd session with the door's protocol settings (size limit, hostname, SMTPUTF8,
    timeout): the benchmark builds its no-op server here too, stock aiosmtpd (``SMTP``); the
    door serves with ``DoorSession``."""
    return session(handler, data_size_limit=max_message_bytes, hostname=hostname,
                   ident="mailbox-actors", enable_SMTPUTF8=True, timeout=60,
                   loop=asyncio.get_running_loop())
