"""``LoopbackDns``: a DNS server on 127.0.0.1 serving zones a test writes (DM-1), on dnslib.

UDP and TCP on one port. A UDP reply over 512 bytes is sent truncated (TC bit, no records) so the
client must ask again over TCP; ``silence(name)`` makes a name never answer (a timeout);
``garble(name)`` answers bytes that are not DNS; ``servfail(name)`` answers SERVFAIL. Names that
hold records of other types answer NODATA, others NXDOMAIN; a CNAME is followed within the zones.
Tests, ``make run`` and the benchmark use it: ``with LoopbackDns() as dns: dns.add(...)``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import selectors
import signal
import socket
import struct
import sys
import threading
from types import TracebackType

from dnslib import AAAA, CNAME, MX, NS, QTYPE, RCODE, RR, SOA, TXT, A, DNSHeader, DNSRecord  # type: ignore[import-untyped]  # dnslib ships no types

__all__ = ["LoopbackDns", "load_zone", "main"]

_UDP_MAX = 512
_TYPES = {"A": (QTYPE.A, A), "AAAA": (QTYPE.AAAA, AAAA), "CNAME": (QTYPE.CNAME, CNAME),
          "NS": (QTYPE.NS, NS), "TXT": (QTYPE.TXT, TXT), "MX": (QTYPE.MX, MX)}


def _bind_pair(host: str, port: int) -> tuple[socket.socket, socket.socket]:
    """A UDP and a TCP socket on one port; with port 0, a port free for both (another process may
    hold the TCP side of the port UDP was given: try another)."""
    for _ in range(50 if port == 0 else 1):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            udp.bind((host, port))
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((host, udp.getsockname()[1]))
            tcp.listen(64)
            return udp, tcp
        except OSError:
            udp.close()
            tcp.close()
            if port:
                raise
    raise OSError(f"no port on {host} is free for both UDP and TCP")


def _key(name: str) -> str:
    return name.lower().rstrip(".")


class LoopbackDns:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._records: dict[tuple[str, str], list[str]] = {}
        self._silent: set[str] = set()
        self._garbled: set[str] = set()
        self._servfail: set[str] = set()
        self._lock = threading.Lock()
        self.questions = 0
        self.tcp_questions = 0
        self._udp, self._tcp = _bind_pair(host, port)
        self.port = self._udp.getsockname()[1]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- the zones -------------------------------------------------------------------------

    def add(self, name: str, rtype: str, *values: str) -> None:
        """Add records: A/AAAA an address, MX "10 host", TXT any text (split into 255-byte
        strings), CNAME/NS a host."""
        if rtype not in _TYPES:
            raise ValueError(f"LoopbackDns serves {sorted(_TYPES)}, not {rtype}")
        with self._lock:
            self._records.setdefault((_key(name), rtype), []).extend(values)

    def set(self, name: str, rtype: str, *values: str) -> None:
        """Replace the name's records of that type (none: remove them)."""
        self.remove(name, rtype)
        if values:
            self.add(name, rtype, *values)

    def remove(self, name: str, rtype: str | None = None) -> None:
        with self._lock:
            for k in [k for k in self._records if k[0] == _key(name)
                      and (rtype is None or k[1] == rtype)]:
                del self._records[k]

    def zone(self, apex: str) -> None:
        """An SOA and an NS (``ns.<apex>`` at this server's address) for the zone, so a resolver
        can find the zone's own nameservers."""
        self.add(apex, "NS", f"ns.{apex}")
        self.add(f"ns.{apex}", "A", self.host)
        with self._lock:
            self._records.setdefault((_key(apex), "SOA"), []).append(apex)

    def silence(self, name: str) -> None:
        self._silent.add(_key(name))

    def garble(self, name: str) -> None:
        self._garbled.add(_key(name))

    def servfail(self, name: str) -> None:
        self._servfail.add(_key(name))

    def heal(self, name: str) -> None:
        """Undo silence, garble and servfail for the name."""
        for s in (self._silent, self._garbled, self._servfail):
            s.discard(_key(name))

    @property
    def nameserver(self) -> tuple[str, int]:
        return self.host, self.port

    # ---- answering -------------------------------------------------------------------------

    def _exists(self, name: str) -> bool:
        return any(k[0] == name or k[0].endswith("." + name) for k in self._records)

    def _rr(self, name: str, rtype: str, value: str) -> RR:
        qtype, cls = _TYPES[rtype] if rtype in _TYPES else (QTYPE.SOA, SOA)
        if rtype == "MX":
            pref, _, host = value.partition(" ")
            rdata = MX(host or ".", int(pref))
        elif rtype == "TXT":
            raw = value.encode()
            rdata = TXT([raw[i:i + 255] for i in range(0, len(raw), 255)] or [b""])
        elif rtype == "SOA":
            rdata = SOA(f"ns.{value}", f"hostmaster.{value}", (1, 3600, 600, 86400, 60))
        else:
            rdata = cls(value)
        return RR(name, qtype, rdata=rdata, ttl=60)

    def answer(self, data: bytes, udp: bool) -> bytes | None:
        """The reply to one query's bytes (None: stay silent)."""
        try:
            req = DNSRecord.parse(data)
        except Exception:  # a test server ignores what it cannot read
            return None
        self.questions += 1
        self.tcp_questions += not udp
        reply = req.reply()
        q = req.q
        name, rtype = _key(str(q.qname)), QTYPE.get(q.qtype)
        if name in self._silent:
            return None
        if name in self._garbled:
            return data[:2] + b"\x81\x80\x00\x01\x00\x07garbage-not-dns"
        with self._lock:
            if name in self._servfail:
                reply.header.rcode = RCODE.SERVFAIL
            else:
                self._fill(reply, name, str(rtype))
        out: bytes = reply.pack()
        if udp and len(out) > _UDP_MAX:
            out = DNSRecord(DNSHeader(id=req.header.id, bitmap=reply.header.bitmap, tc=1),
                            q=req.q).pack()
        return out

    def _fill(self, reply: DNSRecord, name: str, rtype: str) -> None:
        for _ in range(8):  # CNAME chains within the zones
            values = self._records.get((name, rtype))
            if values:
                for v in values:
                    reply.add_answer(self._rr(name, rtype, v))
                return
            cname = self._records.get((name, "CNAME"))
            if cname and rtype != "CNAME":
                reply.add_answer(self._rr(name, "CNAME", cname[0]))
                name = _key(cname[0])
                continue
            break
        if not self._exists(name):
            reply.header.rcode = RCODE.NXDOMAIN

    # ---- serving ---------------------------------------------------------------------------

    def start(self) -> LoopbackDns:
        self._thread = threading.Thread(target=self._serve, name="loopback-dns", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._udp.close()
        self._tcp.close()

    def __enter__(self) -> LoopbackDns:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._udp, selectors.EVENT_READ)
        sel.register(self._tcp, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.05):
                    if key.fileobj is self._udp:
                        try:
                            data, peer = self._udp.recvfrom(4096)
                        except OSError:
                            continue
                        out = self.answer(data, udp=True)
                        if out is not None:
                            self._udp.sendto(out, peer)
                    else:
                        self._serve_tcp()
        finally:
            sel.close()

    def _serve_tcp(self) -> None:
        try:
            conn, _ = self._tcp.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(2.0)
            try:
                while True:
                    head = conn.recv(2, socket.MSG_WAITALL)
                    if len(head) < 2:
                        return
                    data = conn.recv(struct.unpack("!H", head)[0], socket.MSG_WAITALL)
                    out = self.answer(data, udp=False)
                    if out is None:
                        return
                    conn.sendall(struct.pack("!H", len(out)) + out)
            except OSError:
                return


def load_zone(server: LoopbackDns, path: str) -> None:
    """A zone file: JSON ``{"records": [[name, type, value], ...], "zones": [apex, ...]}``."""
    with open(path) as f:
        doc = json.load(f)
    for apex in doc.get("zones", []):
        server.zone(apex)
    for name, rtype, value in doc.get("records", []):
        server.add(name, rtype, value)


def _follow_zone(server: LoopbackDns, path: str, stop: threading.Event) -> None:
    """Serve the zone file as it is now: when it changes, its records replace the served ones
    (``make run`` edits it to make a domain of the example fail, OBJ-4)."""
    seen = os.stat(path).st_mtime_ns
    with open(path) as f:
        served = {(name, rtype) for name, rtype, _ in json.load(f).get("records", [])}
    while not stop.wait(0.2):
        try:
            now = os.stat(path).st_mtime_ns
            if now == seen:
                continue
            seen = now
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):  # being rewritten: the next look reads it whole
            continue
        names = {(name, rtype) for name, rtype, _ in doc.get("records", [])}
        for name, rtype in served - names:
            server.remove(name, rtype)
        served = names
        for name, rtype in names:
            server.set(name, rtype, *[v for n, t, v in doc["records"] if (n, t) == (name, rtype)])


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    """``python -m mailbox_actors.testing.dns [--zone FILE] [--port N]``: serve until stdin closes,
    SIGTERM or SIGINT; prints ``PORT <n>`` once listening (for ``make run`` and the benchmark)."""
    p = argparse.ArgumentParser(prog="python -m mailbox_actors.testing.dns")
    p.add_argument("--zone", help="JSON zone file (see load_zone)")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args(argv)
    server = LoopbackDns(port=a.port)
    stop = threading.Event()
    if a.zone:
        load_zone(server, a.zone)
        threading.Thread(target=_follow_zone, args=(server, a.zone, stop), daemon=True).start()
    signal.signal(signal.SIGTERM, _exit)
    # Ctrl-C in a terminal reaches the whole process group, this server with ``make run``'s
    # nodes: it ends as on SIGTERM (status 0, no traceback) while its parent stops in order.
    signal.signal(signal.SIGINT, _exit)
    # A blocking read of stdin would miss a signal that lands just before it (the handler only
    # runs between the interpreter's steps): the signal's wake-up byte ends the wait instead.
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    with server:
        print(f"PORT {server.port}", flush=True)
        try:
            while True:  # until the parent closes our stdin, or dies; or a signal's handler exits
                ready, _, _ = select.select([sys.stdin, woken], [], [])
                if woken in ready:
                    os.read(woken, 64)  # the handler runs at the next step
                if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
                    break
        except (ValueError, OSError):
            pass
        finally:
            stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
