"""A webhook receiver for mailbox-actors events, standard library only: copy it and change ``on_event``.

It checks the ``x-mailbox-actors-signature`` header (``t=<unix seconds>,v1=<hex HMAC-SHA256>``) with
the tenant's webhook secret, refuses stale timestamps (replays), skips events it has seen before
(delivery is at least once), prints each new event and answers 200; a bad signature gets 401.

Usage::

    WEBHOOK_SECRET='the-secret-you-registered' python examples/webhook_receiver.py --port 8080
    # then register http://127.0.0.1:8080/hooks as the tenant's webhook_url (with that secret)

``--db seen.sqlite`` keeps the seen event ids across restarts (default: in memory).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIGNATURE_HEADER = "x-mailbox-actors-signature"
TOLERANCE_S = 300  # how old (or how far ahead) a signature's timestamp may be


def verify(secret: str, header: str, body: bytes, *, now_s: int, tolerance_s: int = TOLERANCE_S) -> bool:
    """True when ``header`` is a fresh HMAC-SHA256 signature of ``body`` under ``secret``."""
    fields = [part.strip().partition("=") for part in header.split(",")]
    stamps = [v for k, _, v in fields if k == "t" and v.isascii() and v.isdigit()]
    signatures = [v.encode() for k, _, v in fields if k == "v1" and v.isascii()]
    if len(stamps) != 1 or not signatures or abs(now_s - int(stamps[0])) > tolerance_s:
        return False
    signed = stamps[0].encode() + b"." + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest().encode()
    matches = [hmac.compare_digest(expected, s) for s in signatures]  # all of them: constant time
    return any(matches)


class SeenEvents:
    """Event ids already handled, in SQLite (a file survives restarts; ``:memory:`` does not)."""

    def __init__(self, path: str = ":memory:") -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("CREATE TABLE IF NOT EXISTS seen (event_id TEXT PRIMARY KEY, at_s INTEGER)")

    def first_time(self, event_id: str) -> bool:
        """Record ``event_id``; True only the first time it is recorded."""
        with self._lock:
            cur = self._db.execute("INSERT OR IGNORE INTO seen VALUES (?, ?)", (event_id, int(time.time())))
            return cur.rowcount == 1

    def forget(self, event_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM seen WHERE event_id = ?", (event_id,))

    def close(self) -> None:
        self._db.close()


def on_event(event: Mapping[str, Any]) -> None:
    """Your code goes here. Raise to answer 500: the sender will deliver the event again later."""
    print(f"event {event['id']} {event['type']} sequence={event['sequence']}", flush=True)


def receive(secret: str, seen: SeenEvents, headers: Mapping[str, str], body: bytes, *,
            now_s: int | None = None) -> int:
    """Handle one delivery; the HTTP status to answer. ``headers`` keys are lower-case."""
    now = int(time.time()) if now_s is None else now_s
    if not verify(secret, headers.get(SIGNATURE_HEADER, ""), body, now_s=now):
        return 401
    event = json.loads(body)
    # Deduplicate on the id inside the signed body, not on a header an attacker could vary.
    if seen.first_time(event["id"]):
        try:
            on_event(event)
        except Exception:
            seen.forget(event["id"])  # so the redelivery is handled
            return 500
    return 200


def serve(secret: str, port: int, host: str = "127.0.0.1", db: str = ":memory:") -> None:
    seen = SeenEvents(db)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = receive(secret, seen, headers, body)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet: on_event prints
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    print(f"listening on http://{host}:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        seen.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--db", default=":memory:", help="SQLite file for seen event ids")
    args = parser.parse_args()
    secret = os.environ.get("WEBHOOK_SECRET")
    if not secret:
        parser.error("set WEBHOOK_SECRET to the tenant's webhook secret")
    serve(secret, args.port, args.host, args.db)


if __name__ == "__main__":
    main()
