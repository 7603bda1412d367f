"""``mailbox-actors status`` (CL-3): each node's ``/admin/status``, one row a node.

It asks each node one ``GET`` in turn, so it needs no event loop: it speaks HTTP/1.1 over a
blocking socket (``get``, responses parsed by httptools, as the project's pooled client does) and
imports neither asyncio, anyio nor the pooled client (PERF, section 12: ``status`` within 1.2x of
the runtime libraries' import floor, which is those libraries; a command that imported them would
start at the floor). Exit status: 0 every node answered ok, 1 one did not (unreachable, an HTTP
error, a bad answer) or nothing runs on the directory, 2 no operator token or a node's URL that
cannot be asked.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httptools
import msgspec

from mailbox_actors.cli.data_dir import add_target_arguments
from mailbox_actors.platform.locks import lock_holder
from mailbox_actors.platform.node_file import read_node_file
from mailbox_actors.rpc.tokens import read_token

__all__ = ["add_status_arguments", "get", "run_status"]

_TIMEOUT_S = 5.0  # a node's answer, connection included
_MAX_BODY = 16 * 1024 * 1024  # the pooled client's bound on an answer


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")


class _Answer:
    """httptools' callbacks for one response: its status, body and whether it is complete."""

    __slots__ = ("body", "done", "size")

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.size = 0
        self.done = False

    def on_body(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > _MAX_BODY:
            raise ConnectionError(f"an answer over {_MAX_BODY} bytes")
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        self.done = True


def get(url: str, path: str, headers: dict[str, str], timeout_s: float) -> tuple[int, bytes]:
    """One ``GET`` of ``path`` at the base URL ``url`` (``http(s)://host[:port]``) on a
    connection of its own: ``(status, body)``. Raises OSError (ConnectionError, TimeoutError, an
    SSL error) when no whole answer came within ``timeout_s``, connecting included; ValueError
    for a URL that is not a base URL or a header that would split the request."""
    from urllib.parse import urlsplit  # pathlib has imported it

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or \
            parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"a node's URL must be http(s)://host[:port], got {url!r}")
    host, default = parts.hostname, 443 if parts.scheme == "https" else 80
    port = parts.port or default
    # getaddrinfo takes bytes as they are, and a str through the IDNA codec (a module and
    # unicodedata loaded for every command given a plain IP address or an ASCII name).
    address = host.encode("ascii") if host.isascii() else host.encode("idna")
    name = f"[{host}]" if ":" in host else address.decode("ascii")
    hostport = name if port == default else f"{name}:{port}"
    lines = [f"GET {path} HTTP/1.1", f"host: {hostport}",
             *(f"{k}: {v}" for k, v in headers.items()), "content-length: 0", "", ""]
    if any("\r" in line or "\n" in line for line in lines):
        raise ValueError("a header name or value contains CR or LF")
    request = "\r\n".join(lines).encode("latin-1")
    deadline = time.monotonic() + timeout_s
    sock = socket.create_connection((address, port), timeout=timeout_s)  # type: ignore[arg-type]
    try:
        if parts.scheme == "https":  # verified against the system's trusted CAs, as the pool does
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.sendall(request)
        answer = _Answer()
        parser = httptools.HttpResponseParser(answer)
        while not answer.done:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the node closed the connection before its whole answer")
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as e:
                if not answer.done:  # bytes after a whole answer are not read
                    raise ConnectionError(f"malformed HTTP answer: {e}") from None
        return parser.get_status_code(), b"".join(answer.body)
    finally:
        sock.close()


def _fail(text: str, status: int) -> int:
    print(f"mailbox-actors status: {text}", file=sys.stderr)
    return status


def run_status(args: argparse.Namespace) -> int:
    data = Path(args.data)
    running = lock_holder(data) is not None
    if not running and not args.url:
        return _fail(f"no cluster is running on {data} (start one with "
                     f"'mailbox-actors cluster --data {data}')", 1)
    try:
        operator = read_token(data, "operator")
    except FileNotFoundError as e:
        return _fail(f"no operator token: set MAILBOX_ACTORS_OPERATOR_TOKEN (or "
                     f"_OPERATOR_TOKEN_FILE) ({e.filename} does not exist)", 2)
    restarts: dict[str, int] = {}
    try:
        doc = msgspec.json.decode((data / "cluster.json").read_bytes())
        nodes = [(n["name"], n["url"]) for n in doc["nodes"]]
        restarts = {n["name"]: int(n.get("restarts", 0)) for n in doc["nodes"]}
    except FileNotFoundError:
        # A single node records where it listens (any port); --url overrides it.
        nodes = [("node-0", args.url) if args.url else read_node_file(data)
                 or ("node-0", "http://127.0.0.1:8787")]
    rows: list[dict[str, Any]] = []
    for name, url in nodes:
        try:
            status, body = get(url, "/admin/status", {"authorization": f"Bearer {operator}"},
                               _TIMEOUT_S)
        except OSError:  # refused, reset, timed out, an SSL failure, a malformed answer
            row: dict[str, Any] = {"status": "unreachable"}
        except ValueError as e:  # a URL that cannot be asked
            return _fail(f"{name}: {e}", 2)
        else:
            row = {"status": f"HTTP {status}"}
            if status == 200:
                try:
                    found = msgspec.json.decode(body)
                except msgspec.DecodeError:  # another service on the port, an HTML page
                    found = None
                row = found if isinstance(found, dict) else {"status": "bad answer"}
        rows.append({"name": name, "url": url, "restarts": restarts.get(name, 0)} | row)
    queues: dict[str, Any] = next((r["queues"] for r in rows if r.get("queues")), {})
    if args.json:
        import json

        print(json.dumps({"nodes": rows, "queues": queues}, indent=2))
    else:
        print(f"{'node':8} {'status':12} {'pid':>8} {'restarts':>8} {'actors':>8} {'alarms':>8}"
              "  url")
        for r in rows:
            print(f"{r['name']:8} {r.get('status', '?'):12} {r.get('pid', '-')!s:>8} "
                  f"{r['restarts']:>8} "
                  f"{r.get('actors_active', '-')!s:>8} {r.get('alarms_pending', '-')!s:>8}  "
                  f"{r['url']}")
        if queues:
            print(f"\n{'queue':16} {'ready':>8} {'delayed':>8} {'in flight':>10} {'dead':>8}")
            for name, q in sorted(queues.items()):
                print(f"{name:16} {q.get('ready', 0):>8} {q.get('delayed', 0):>8} "
                      f"{q.get('in_flight', 0):>10} {q.get('dead_letters', 0):>8}")
    return 0 if all(r.get("status") == "ok" for r in rows) else 1
