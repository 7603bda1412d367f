"""The real resolver against a hostile DNS server on loopback (DM-1, DM-2; bad input): random
bytes, replies to another id or another question, bare headers, lying section counts, truncation
that goes on over TCP, a TCP reply cut short or longer than it says, and a 64 KB answer. Each is an
answer value (a transient failure where nothing can be read: unknown, never fail), never an
exception; an answer of many records stays within the caps."""

from __future__ import annotations

import os
import selectors
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import dns.flags
import dns.message
import dns.rrset
import pytest

from mailbox_actors.core.dns.answers import TRANSIENT, Outcome, Rtype
from mailbox_actors.platform.dns.real import DnspythonResolver
from mailbox_actors.platform.dns.resolver import DnsSettings

pytestmark = pytest.mark.anyio

Reply = Callable[[bytes], bytes | None]  # a query's bytes -> the reply's (None: silence)


def _truncated(query: bytes) -> bytes:
    response = dns.message.make_response(dns.message.from_wire(query))
    response.flags |= dns.flags.TC
    return response.to_wire()


def _other_question(query: bytes) -> bytes:
    other = dns.message.make_query("other.example", "TXT")
    other.id = dns.message.from_wire(query).id
    return dns.message.make_response(other).to_wire()


def _many_txt(query: bytes) -> bytes:
    q = dns.message.from_wire(query)
    response = dns.message.make_response(q)
    response.answer.append(dns.rrset.from_text(
        q.question[0].name, 60, "IN", "TXT", *[f'"v=spf1 {n:03d} {"x" * 240}"' for n in range(240)]))
    return response.to_wire(max_size=65535)


def _framed(reply: Reply) -> Reply:
    def tcp(query: bytes) -> bytes | None:
        out = reply(query)
        return None if out is None else struct.pack("!H", len(out)) + out
    return tcp


UDP_ONLY: dict[str, Reply] = {
    "random_bytes": lambda q: os.urandom(300),
    "another_id": lambda q: b"\x00\x00" + q[2:],
    "another_question": _other_question,
    "bare_header": lambda q: q[:2] + b"\x81\x80" + b"\x00" * 8,
    "lying_answer_count": lambda q: q[:2] + b"\x81\x80\x00\x01\xff\xff\x00\x00\x00\x00" + q[12:],
}
OVER_TCP: dict[str, Reply] = {
    "tcp_garbage": lambda q: b"\x00\x10garbage-not-dns!",
    "tcp_cut_short": lambda q: b"\xff\xff" + b"abc",
    "tcp_truncated_again": _framed(_truncated),
}


def _answer_tcp(conn: socket.socket, tcp: Reply) -> None:
    with conn:
        conn.settimeout(5)
        try:
            size = struct.unpack("!H", conn.recv(2, socket.MSG_WAITALL))[0]
            out = tcp(conn.recv(size, socket.MSG_WAITALL))
            if out is not None:
                conn.sendall(out)
        except (OSError, struct.error):
            pass  # the client hung up on us


def _udp_and_tcp_on_one_port() -> tuple[socket.socket, socket.socket]:
    """Another process may hold the TCP side of the port UDP was given: try another."""
    for _ in range(50):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        t = socket.socket()
        try:
            u.bind(("127.0.0.1", 0))
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            t.bind(("127.0.0.1", u.getsockname()[1]))
            t.listen(8)
            return u, t
        except OSError:
            u.close()
            t.close()
    raise OSError("no loopback port free for both UDP and TCP")


@contextmanager
def hostile_dns(udp: Reply, tcp: Reply) -> Iterator[int]:
    """UDP and TCP on one loopback port, each query answered by ``udp``/``tcp``."""
    u, t = _udp_and_tcp_on_one_port()
    stop = threading.Event()

    def serve() -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(u, selectors.EVENT_READ)
            sel.register(t, selectors.EVENT_READ)
            while not stop.is_set():
                for key, _ in sel.select(timeout=0.05):  # the stop flag's poll, not a wait
                    if key.fileobj is u:
                        query, peer = u.recvfrom(4096)
                        out = udp(query)
                        if out is not None:
                            u.sendto(out, peer)
                    else:
                        _answer_tcp(t.accept()[0], tcp)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield u.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=10)
        u.close()
        t.close()


def resolver(port: int, timeout_ms: int = 300) -> DnspythonResolver:
    return DnspythonResolver(DnsSettings(nameservers=("127.0.0.1",), port=port,
                                         timeout_ms=timeout_ms, attempts=1))


@pytest.mark.parametrize("name", sorted(UDP_ONLY))
async def test_garbage_over_udp_is_a_transient_answer(name: str) -> None:
    """DM-1, DM-2: a UDP reply that is not an answer to the question asked is never taken for
    one: the question times out (unknown), whatever the bytes were."""
    with hostile_dns(UDP_ONLY[name], lambda q: None) as port:
        answer = await resolver(port).resolve("example.com", Rtype.TXT)
    assert answer.outcome in TRANSIENT and answer.records == (), answer


@pytest.mark.parametrize("name", sorted(OVER_TCP))
async def test_garbage_after_truncation_is_a_transient_answer(name: str) -> None:
    """DM-1, DM-2: a truncated UDP reply sends the question to TCP; a TCP reply that is garbage,
    shorter than its length says, or truncated again is a transient failure, never NODATA (which
    would fail the record)."""
    with hostile_dns(_truncated, OVER_TCP[name]) as port:
        answer = await resolver(port).resolve("example.com", Rtype.TXT)
    assert answer.outcome in TRANSIENT and answer.records == (), answer


async def test_a_64_kb_answer_over_tcp_is_oversize() -> None:
    """DM-1: 240 TXT records in one 60 KB TCP reply are more than the cap: OVERSIZE, and no
    record is handed to a check."""
    with hostile_dns(_truncated, _framed(_many_txt)) as port:
        # a whole answer is expected: time enough for it on a busy machine
        answer = await resolver(port, timeout_ms=10_000).resolve("example.com", Rtype.TXT)
    assert (answer.outcome, answer.records) == (Outcome.OVERSIZE, ())
