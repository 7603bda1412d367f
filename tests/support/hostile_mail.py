"""A corpus of hostile mail, reused by every test of inbound parsing, ingest and the SMTP door.

``HAND_WRITTEN`` names cases written on purpose (each one a way real mail breaks parsers);
``generated(seed, n)`` derives more from them by seeded mutation (so a failure is reproducible from
its seed). ``SECRET_ADDRESSES`` are addresses every case carries, which no log line may show.
"""

from __future__ import annotations

import random

__all__ = ["HAND_WRITTEN", "OVER_CAP", "SECRET_ADDRESSES", "generated", "nested_multipart"]

SECRET_ADDRESSES = ("secret.sender@hostile.example", "secret.rcpt@hostile.example")
_HEAD = (b"From: Secret Sender <secret.sender@hostile.example>\r\n"
         b"To: secret.rcpt@hostile.example\r\n")


def nested_multipart(depth: int) -> bytes:
    out = _HEAD + b'Subject: deep\r\nContent-Type: multipart/mixed; boundary="b0"\r\n\r\n'
    for i in range(1, depth):
        out += b'--b%d\r\nContent-Type: multipart/mixed; boundary="b%d"\r\n\r\n' % (i - 1, i)
    out += b"--b%d\r\nContent-Type: text/plain\r\n\r\ndeep down\r\n" % (depth - 1)
    for i in range(depth - 1, -1, -1):
        out += b"--b%d--\r\n" % i
    return out


HAND_WRITTEN: dict[str, bytes] = {
    "plain": _HEAD + b"Subject: hello\r\nMessage-ID: <ok@hostile.example>\r\n\r\nhi\r\n",
    "bare_lf": (b"From: secret.sender@hostile.example\nTo: secret.rcpt@hostile.example\n"
                b"Subject: bare\nMessage-ID: <lf@hostile.example>\n\nline one\nline two\n"),
    "nul_bytes": _HEAD + b"Subject: nu\x00l\r\nX-Nul: a\x00b\r\n\r\nbody \x00 with nul\r\n",
    "eight_bit_headers": _HEAD + b"Subject: caf\xc3\xa9 \xff\xfe raw\r\nX-Latin1: \xe9t\xe9\r\n"
                                 b"\r\nbody\r\n",
    "bad_encoded_words": _HEAD + (b"Subject: =?utf-8?q?broken =?x-unknown?b?!!!?= "
                                  b"=?utf-8?b?not base64?=\r\nX-Name: =?UTF-8?Q?a?= =?UTF-8?Q?=FF?=\r\n"
                                  b"Cc: =?x-unknown?b?!!!?=\r\n\r\nbody\r\n"),
    "header_line_1mb": _HEAD + b"X-Huge: " + b"a" * (1 << 20) + b"\r\nSubject: big\r\n\r\nb\r\n",
    "headers_10000": _HEAD + b"".join(b"X-H%d: v%d\r\n" % (i, i) for i in range(10_000))
                     + b"\r\nbody\r\n",
    "multipart_1000_deep": nested_multipart(1000),
    "boundary_never_closes": _HEAD + (b'Subject: open\r\nContent-Type: multipart/mixed; '
                                      b'boundary="never"\r\n\r\n--never\r\nContent-Type: '
                                      b"text/plain\r\n\r\nstill going\r\n--never\r\n"
                                      b"Content-Type: application/pdf\r\n\r\n%PDF-1.4\r\n"),
    "bad_message_id": _HEAD + b"Subject: id\r\nMessage-ID: not-a-message-id\r\n"
                              b"In-Reply-To: <>@\r\nReferences: <<<>>> <ok@x\r\n\r\nb\r\n",
    "malformed_addresses": (b"From: \"\\\r\nTo: :;<@>, \"\r\nCc: <<<@@@>>>\r\n"
                            b"Reply-To: secret.sender@hostile.example\r\n\r\nbody\r\n"),
    "no_header_separator": b"From secret.sender@hostile.example\r\nno colon here\r\nbody\r\n",
    "bad_base64_and_charset": _HEAD + (b"Content-Type: text/plain; charset=x-no-such\r\n"
                                       b"Content-Transfer-Encoding: base64\r\n\r\n!!!@@@###\r\n"),
    "bad_date": _HEAD + b"Date: Thu, 99 Foo 20266 25:61:61 +9999\r\n\r\nbody\r\n",
    "bad_thread_index": _HEAD + b"Thread-Index: %%%not-base64%%%\r\n\r\nbody\r\n",
    "empty": b"",
    "only_blank_lines": b"\r\n\r\n\r\n",
    "binary_garbage": bytes(range(256)) * 64,
    "long_references": _HEAD + b"References: " + b" ".join(
        b"<r%d@hostile.example>" % i for i in range(5000)) + b"\r\n\r\nbody\r\n",
    "attachment_with_bad_filename": _HEAD + (
        b'Content-Type: multipart/mixed; boundary="z"\r\n\r\n--z\r\nContent-Type: '
        b'application/octet-stream; name="=?x-bad?q?=ZZ?="\r\nContent-Disposition: attachment; '
        b"filename*=x-bad''%ZZ%\r\n\r\ndata\r\n--z--\r\n"),
}

# A message one byte over a cap of 1 MiB (tests set max_message_bytes=1 MiB to keep it small).
OVER_CAP = _HEAD + b"Subject: big\r\n\r\n" + b"x" * (1 << 20)

_MUTATIONS = (b"\r\n", b"\n", b"\r", b"\x00", b"\xff", b":", b"=?", b"?=", b"<", b">", b"--",
              b'"', b"\\", b"\t", b" ", b"=?utf-8?b?", b"Content-Type: multipart/mixed; "
              b'boundary="q"\r\n', b"--q\r\n")


def generated(seed: int, n: int) -> list[tuple[str, bytes]]:
    """``n`` messages mutated from the small hand-written cases, reproducible from ``seed``."""
    rnd = random.Random(seed)
    bases = [v for v in HAND_WRITTEN.values() if 0 < len(v) < 20_000]
    out = []
    for i in range(n):
        data = bytearray(rnd.choice(bases))
        for _ in range(rnd.randint(1, 12)):
            pos = rnd.randrange(len(data) + 1)
            op = rnd.random()
            if op < 0.5:
                data[pos:pos] = rnd.choice(_MUTATIONS)
            elif op < 0.8 and data:
                del data[pos:pos + rnd.randint(1, 8)]
            else:
                data[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16)))
        out.append((f"generated-{seed}-{i}", bytes(data)))
    return out
