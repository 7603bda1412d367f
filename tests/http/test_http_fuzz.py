"""Fuzzing a live node over real sockets on 127.0.0.1 with thousands of malformed requests from a
seeded generator: every answer has a documented status and a well-formed error body, the node keeps
serving, leaks no stack trace or path, and writes nothing outside its data directory (RPC-7, REL-2,
REL-3).

The seed is ``MAILBOX_ACTORS_FUZZ_SEED`` (default below) and is printed in every failure message;
re-run with the same seed to replay the same requests.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httptools
import pytest

from mailbox_actors.http.client import HttpPool, HttpTransportError
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.rpc.openapi import openapi_json
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode

TOKEN = "cluster-token-0123456789abcdef"
OPERATOR = "operator-token-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("MAILBOX_ACTORS_FUZZ_SEED", "20260101"))
REQUEST_TIMEOUT_S = 0.5
MAX_BODY = 1 << 20
DOCUMENTED = frozenset({200, 400, 401, 403, 404, 405, 413})
OWNER_RE = re.compile(r"^[A-Za-z0-9_\-:.]+$")
PROJECT_PATH_RE = re.compile(r"[\w./-]*mailbox_actors/[\w/]+\.py|site-packages|Traceback|File \"")
FAR = 2**52

N_FRAMED = 8000       # well-framed HTTP requests over keep-alive connections
N_RAW = 2400          # raw byte streams, one connection each
N_SLOW = 24           # clients that send half a request and stop


# ---- the live node ---------------------------------------------------------------------------


class Live:
    def __init__(self, rt: TestRuntime, url: str, port: int, pool: HttpPool,
                 server: RpcHttpServer) -> None:
        self.rt = rt
        self.url = url
        self.port = port
        self.pool = pool
        self.server = server

    async def req(self, method: str, path: str, body: bytes = b"", token: str | None = TOKEN,
                  headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        h = {"content-type": "application/json"} | (headers or {})
        if token is not None:
            h["authorization"] = f"Bearer {token}"
        return await self.pool.request(self.url, method, path, h, body, timeout_s=10)


@pytest.fixture
async def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Live]:
    # Run from an empty directory of our own so a write relative to the cwd would be seen.
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    async with TestRuntime(tmp_path / "node") as rt:
        app = NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR,
                      openapi=openapi_json(DEFAULT_OBJECTS, "test"))
        server = RpcHttpServer(app, max_body_bytes=MAX_BODY, request_timeout_s=REQUEST_TIMEOUT_S)
        port = await server.start("127.0.0.1", 0)
        try:
            async with HttpPool(max_per_host=64) as pool:
                yield Live(rt, f"http://127.0.0.1:{port}", port, pool, server)
        finally:
            await server.stop(grace_s=1.0)


def listing(root: Path) -> set[Path]:
    return set(root.rglob("*"))


# ---- checking answers ------------------------------------------------------------------------


@dataclass
class Findings:
    """Every failed check, with the request that caused it; reported all at once at the end."""

    seed: int
    leak_markers: tuple[str, ...]
    failures: list[str] = field(default_factory=list)
    answers: int = 0
    closed_without_answer: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)     # failures by kind of request

    def fail(self, what: str, reason: str) -> None:
        self.failures.append(f"{reason}\n    request: {what}")
        kind = what.split("]", 1)[0].lstrip("[") if what.startswith("[") else what[:40]
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def check(self, status: int, body: bytes, what: str, *, ids_ok: bool = False) -> None:
        """One HTTP answer: documented status, JSON ok/err body, code matching the table, no leak."""
        self.answers += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        text = body.decode("utf-8", "replace")
        if status not in DOCUMENTED:
            self.fail(what, f"undocumented status {status}: {text[:300]}")
        leak = PROJECT_PATH_RE.search(text) or next(
            (m for m in self.leak_markers if m in text), None)
        if leak:
            self.fail(what, f"the answer leaks {leak!r}: {text[:300]}")
        try:
            decoded = json.loads(body)
        except ValueError:
            self.fail(what, f"status {status} with a body that is not JSON: {text[:300]}")
            return
        if not isinstance(decoded, dict) or len(decoded) != 1:
            self.fail(what, f"status {status}: body is not a one-key object: {text[:300]}")
            return
        if "ok" in decoded:
            if status != 200:
                self.fail(what, f"an ok body with status {status}")
            self.codes["ok"] = self.codes.get("ok", 0) + 1
            return
        if "id" in decoded and ids_ok:
            if status != 200 or not re.fullmatch(r"[0-9a-f]{64}", str(decoded["id"])):
                self.fail(what, f"bad id answer {status}: {text[:300]}")
            return
        err = decoded.get("err")
        if not isinstance(err, dict):
            self.fail(what, f"status {status}: neither ok nor err: {text[:300]}")
            return
        missing = {"code", "message", "fix", "retryable"} - set(err)
        if missing:
            self.fail(what, f"error body lacks {sorted(missing)}: {text[:300]}")
            return
        if not (isinstance(err["message"], str) and isinstance(err["fix"], str) and err["fix"]
                and isinstance(err["retryable"], bool)):
            self.fail(what, f"error body fields have the wrong types: {text[:300]}")
        try:
            code = ErrorCode(err["code"])
        except ValueError:
            self.fail(what, f"unknown error code {err['code']!r}")
            return
        self.codes[code.value] = self.codes.get(code.value, 0) + 1
        if err["retryable"] is not code.retryable:
            self.fail(what, f"{code.value}: retryable={err['retryable']} disagrees with the table")
        if status == 200:
            if code is ErrorCode.INTERNAL_ERROR:
                self.fail(what, f"200 with internal_error (a crash inside the node): {text[:300]}")
        elif status == 404 and code is ErrorCode.INVALID_REQUEST:
            # RPC-7's unknown path: HTTP 404 with invalid_request (wire/errors.UnknownPath).
            if (err.get("details") or {}).get("field") != "path":
                self.fail(what, f"404 that names no path: {text[:300]}")
        elif code.http_status != status:
            self.fail(what, f"HTTP {status} with code {code.value}, whose status is "
                            f"{code.http_status}: {text[:300]}")

    def report(self) -> str:
        head = (f"{len(self.failures)} failed checks (seed {self.seed}; re-run with "
                f"MAILBOX_ACTORS_FUZZ_SEED={self.seed}); failures by kind of request {self.kinds}; "
                f"statuses {self.statuses}; codes {self.codes}; connections closed without an "
                f"answer {self.closed_without_answer}")
        return head + "\n" + "\n".join(self.failures[:12])


# ---- generating requests ---------------------------------------------------------------------


@dataclass
class Framed:
    """A well-framed HTTP request sent through the keep-alive pool."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    note: str

    def describe(self) -> str:
        hs = {k: (v if len(v) < 80 else v[:40] + f"...({len(v)} chars)") for k, v in
              self.headers.items()}
        return (f"[{self.note}] {self.method} {self.path[:150]!r} headers={hs} "
                f"body({len(self.body)})={self.body[:200]!r}")


@dataclass
class Raw:
    """Bytes written straight to a new socket; ``half_close`` sends EOF after them."""

    data: bytes
    note: str
    half_close: bool = True
    ids_ok: bool = False

    def describe(self) -> str:
        return f"[{self.note}] raw({len(self.data)})={self.data[:300]!r} half_close={self.half_close}"


WRONG_VALUES: list[Any] = [
    None, True, False, 0, -1, 1.5, -0.0, 1e300, 2**64, -(2**63) - 1, 2**200, "", "x", "1",
    "A" * 300, "../", "../../etc/passwd", "..%2f", "%2e%2e%2f", "\x00", "%00", "a\x00b",
    "\ud800", "req_", "req_\n", "\u202e", [], [1, 2], [None], {}, {"a": 1}, {"op": "init"},
    [[[[[]]]]], "null", "true",
]


def not_an_owner(value: Any) -> bool:
    """Values a tenant/identity field must refuse (a valid-looking one would be another owner)."""
    return value is not None and not (isinstance(value, str) and 1 <= len(value) <= 128
                                      and OWNER_RE.match(value))


OWNER_WRONG = [v for v in WRONG_VALUES if not_an_owner(v)]

OPS: dict[str, list[dict[str, Any]]] = {
    "tenant_quota": [
        {"op": "init", "per_minute": 100_000, "per_day": 1_000_000},
        {"op": "reserve", "key": "k1", "count": 1},
        {"op": "reserve", "key": "k2"},
        {"op": "release", "reservation_id": "rsv_x"},
        {"op": "usage"},
        {"op": "status"},
    ],
    "identity_mailbox": [{"op": "init"}, {"op": "status"}, {"op": "status"}, {"op": "erase"}],
    "domain_monitor": [{"op": "init", "domain": "example.com"}, {"op": "status"}],
}


class Gen:
    """Seeded generator of malformed requests against one node's namespaces and ids."""

    def __init__(self, rng: random.Random, ids: dict[str, list[str]],
                 foreign: dict[str, str]) -> None:
        self.rng = rng
        self.ids = ids          # valid ids per namespace (some initialised, some not)
        self.foreign = foreign  # an id of another namespace, per namespace

    # -- pieces

    def text(self, n: int, alphabet: str = string.printable) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def junk_bytes(self, n: int) -> bytes:
        return bytes(self.rng.getrandbits(8) for _ in range(n))

    def json_value(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if depth > 3 or r < 0.4:
            return self.rng.choice([None, True, False, self.rng.randint(-2**70, 2**70),
                                    self.rng.random() * 1e6, self.text(self.rng.randint(0, 12))])
        if r < 0.7:
            return [self.json_value(depth + 1) for _ in range(self.rng.randint(0, 4))]
        return {self.text(self.rng.randint(0, 6)): self.json_value(depth + 1)
                for _ in range(self.rng.randint(0, 4))}

    def namespace(self) -> str:
        return self.rng.choice(list(self.ids))

    def good_id(self, ns: str) -> str:
        return self.rng.choice(self.ids[ns])

    def envelope(self, ns: str) -> dict[str, Any]:
        req = dict(self.rng.choice(OPS[ns]))
        if req["op"] == "reserve":
            req["key"] = f"k{self.rng.randint(0, 50)}"
        env: dict[str, Any] = {"v": 1, "tenant_id": "acme", "identity_id": "i1",
                               "request_id": f"req_{self.rng.randint(0, 10**9)}",
                               "deadline_ms": FAR, "req": req}
        if self.rng.random() < 0.3:
            env["actor_key_id"] = "key-1"
        return env

    def auth(self) -> dict[str, str]:
        return {"content-type": "application/json", "authorization": f"Bearer {TOKEN}"}

    def rpc(self, ns: str, body: bytes, note: str, *, oid: str | None = None) -> Framed:
        return Framed("POST", f"/rpc/{ns}/{oid or self.good_id(ns)}", self.auth(), body, note)

    # -- categories of framed requests

    def invalid_json(self) -> Framed:
        ns = self.namespace()
        good = json.dumps(self.envelope(ns)).encode()
        choice = self.rng.randrange(9)
        if choice == 0:
            body = self.junk_bytes(self.rng.randint(0, 200))
        elif choice == 1:
            body = good[: self.rng.randrange(len(good))]
        elif choice == 2:
            body = good.replace(b'"', b"'")
        elif choice == 3:
            body = good[:-1] + b",}"
        elif choice == 4:
            body = good.replace(b"1,", b"NaN,", 1)
        elif choice == 5:
            body = b"\xef\xbb\xbf" + good
        elif choice == 6:
            body = good.replace(b'"acme"', b'"\\ud800"')
        elif choice == 7:
            body = good + b" " + good
        else:
            body = good.replace(b"{", b"{\x00", 1)
        return self.rpc(ns, body, f"invalid json #{choice}")

    def deep_json(self) -> Framed:
        ns = self.namespace()
        depth = self.rng.choice([2_000, 10_000, 100_000])
        key = self.rng.choice(["req", "v", "extra"])
        body = b'{"v":1,"' + key.encode() + b'":' + b"[" * depth + b"]" * depth + b"}"
        return self.rpc(ns, body, f"json nested {depth} deep under {key}")

    def wrong_shape(self) -> Framed:
        ns = self.namespace()
        value = self.json_value()
        if self.rng.random() < 0.3:
            value = {"v": 1, "req": value, "request_id": "req_1", "deadline_ms": FAR}
        return self.rpc(ns, json.dumps(value).encode(), "valid json, wrong shape")

    def wrong_type(self) -> Framed:
        ns = self.namespace()
        env = self.envelope(ns)
        fields = ["v", "tenant_id", "identity_id", "request_id", "actor_key_id", "deadline_ms",
                  "req"] + [f"req.{k}" for k in env["req"]]
        target = self.rng.choice(fields)
        owner_field = target in ("tenant_id", "identity_id", "actor_key_id")
        value = self.rng.choice(OWNER_WRONG if owner_field else WRONG_VALUES)
        if target.startswith("req."):
            env["req"][target[4:]] = value
        else:
            env[target] = value
        return self.rpc(ns, json.dumps(env).encode(), f"wrong type at {target}")

    def missing_or_extra(self) -> Framed:
        ns = self.namespace()
        env = self.envelope(ns)
        choice = self.rng.randrange(3)
        if choice == 0:
            del env[self.rng.choice(["v", "request_id", "deadline_ms", "req"])]
        elif choice == 1:
            env["req"][self.text(5, string.ascii_lowercase)] = self.json_value()
        else:
            required = [k for k in env["req"] if k != "op"] or ["op"]
            del env["req"][self.rng.choice(required)]
        return self.rpc(ns, json.dumps(env).encode(), f"missing or extra field #{choice}")

    def unknown_op(self) -> Framed:
        ns = self.namespace()
        env = self.envelope(ns)
        env["req"]["op"] = self.rng.choice([
            "fly", "INIT", "Init", "init ", "", "__class__", "../init", "init\x00", "send",
            self.text(self.rng.randint(1, 40), string.ascii_letters + "_"), 1, None, ["init"]])
        return self.rpc(ns, json.dumps(env).encode(), "unknown op")

    def version(self) -> Framed:
        ns = self.namespace()
        env = self.envelope(ns)
        env["v"] = self.rng.choice([0, 2, -1, 10**30, 1.0, "1", True, None])
        return self.rpc(ns, json.dumps(env).encode(), "bad version")

    def deadline(self) -> Framed:
        ns = self.namespace()
        env = self.envelope(ns)
        env["deadline_ms"] = self.rng.choice([0, 1, 2**63, 2**64 - 1, -5])
        return self.rpc(ns, json.dumps(env).encode(), "odd deadline")

    def unknown_namespace(self) -> Framed:
        ns = self.rng.choice(list(self.ids))
        bad = self.rng.choice([
            ns.upper(), ns + "s", "", "..", "%2e%2e", "..%2F" + ns, "%00", ns + "%00",
            "admin", "rpc", self.text(self.rng.randint(1, 70), string.ascii_letters + "_-.%"),
            "%74enant_quota"])
        return Framed("POST", f"/rpc/{bad}/{self.good_id(ns)}", self.auth(),
                      json.dumps(self.envelope(ns)).encode(), "unknown namespace")

    def bad_id(self) -> Framed:
        ns = self.namespace()
        good = self.good_id(ns)
        bad = self.rng.choice([
            "..", "../x", "..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f%2e%2e%2f", "%2E%2E%2F", "%00",
            good + "%00", good[:-3] + "%00", "%00" + good[3:], good.upper(), good[:63], good[:10],
            "x", good + "0", good + "%0a", "0" * 64, "f" * 64, "g" * 64, self.foreign[ns],
            good[:-1] + ("0" if good[-1] != "0" else "1"), ".", "%2e", good + "?x=1",
            "..;", good.replace("a", "A", 1), "~", "%ff" * 3])
        return Framed("POST", f"/rpc/{ns}/{bad}", self.auth(),
                      json.dumps(self.envelope(ns)).encode(), "bad id")

    def bad_path(self) -> Framed:
        ns = self.namespace()
        path = self.rng.choice([
            f"/rpc/{ns}", f"/rpc/{ns}/", "/rpc", "/rpc/", f"/rpc/{ns}/{self.good_id(ns)}/x",
            f"/rpc/{ns}/../{self.good_id(ns)}", f"/rpc//{self.good_id(ns)}", "/", "//",
            "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/RPC/x/y", "/ids", "/ids/x",
            "/admin", "/admin/status/x", "/healthz/", "/metrics/x", "/openapi.json/..",
            "/" + self.text(self.rng.randint(1, 200), string.ascii_letters + "/%._-~"),
        ])
        return Framed(self.rng.choice(["GET", "POST", "PUT"]), path, self.auth(),
                      json.dumps(self.envelope(ns)).encode(), "unknown path")

    def wrong_method(self) -> Framed:
        ns = self.namespace()
        method = self.rng.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND",
                                  "MKCOL", "LOCK", "PURGE", "SEARCH", "REPORT", "COPY"])
        path = self.rng.choice([f"/rpc/{ns}/{self.good_id(ns)}", f"/ids/{ns}/unique",
                                f"/rpc/{ns}/x", "/admin/status", "/healthz", "/metrics",
                                "/openapi.json", f"/ids/{ns}/by-name/a"])
        if path in ("/admin/status", "/healthz", "/metrics", "/openapi.json") or "by-name" in path:
            method = self.rng.choice(["POST", "PUT", "DELETE", "PATCH"])
        return Framed(method, path, self.auth(), json.dumps(self.envelope(ns)).encode(),
                      "wrong method")

    def bad_token(self) -> Framed:
        ns = self.namespace()
        path = self.rng.choice([f"/rpc/{ns}/{self.good_id(ns)}", f"/ids/{ns}/unique",
                                f"/ids/{ns}/by-name/x", "/admin/status"])
        method = "GET" if ("by-name" in path or path == "/admin/status") else "POST"
        headers = {"content-type": "application/json"}
        auth = self.rng.choice([
            None, "", "Bearer", "Bearer ", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}",
            f"Basic {TOKEN}", f"Token {TOKEN}", f"Bearer {OPERATOR}", TOKEN, f"Bearer{TOKEN}",
            f"Bearer {TOKEN} {TOKEN}", "Bearer " + "a" * 5000, "Bearer \xe9\xe9\xe9",
            f"Bearer {TOKEN.upper()}", f"Bearer {OPERATOR[:-1]}", "Bearer null",
            f"Bearer {self.text(30, string.ascii_letters)}"])
        if path == "/admin/status":
            # The cluster token on the operator endpoint, never the operator token itself.
            auth = f"Bearer {TOKEN}" if auth == f"Bearer {OPERATOR}" else auth
        if auth is not None:
            headers["authorization"] = auth
        return Framed(method, path, headers, json.dumps(self.envelope(ns)).encode(), "token")

    def ids_endpoint(self) -> Framed:
        ns = self.rng.choice([*self.ids, "nope", "TENANT_QUOTA", "..", "%2e%2e", "%00", ""])
        name = self.rng.choice([
            "..", "..%2F..%2Fetc", "%2e%2e%2f", "%00", "a%00b", "%ff%fe", "%ED%A0%80", "%",
            "%zz", "a" * 1025, "a" * 1024, "", "x", "%2F", self.text(20, string.ascii_letters)])
        if self.rng.random() < 0.5:
            return Framed("GET", f"/ids/{ns}/by-name/{name}", self.auth(), b"", "ids by-name")
        return Framed("POST", f"/ids/{ns}/unique", self.auth(), self.junk_bytes(10), "ids unique")

    def huge_header(self) -> Framed:
        ns = self.namespace()
        headers = self.auth()
        if self.rng.random() < 0.5:
            headers["x-big"] = "a" * self.rng.randint(17_000, 60_000)
        else:
            for i in range(self.rng.randint(400, 1200)):
                headers[f"x-h{i}"] = "v" * 30
        case = self.rpc(ns, json.dumps(self.envelope(ns)).encode(), "huge header")
        case.headers = headers
        return case

    def big_body(self) -> Framed:
        ns = self.namespace()
        size = MAX_BODY + self.rng.choice([1, 2, 1000, 65_536, 1 << 20])
        inner = json.dumps(self.envelope(ns)).encode()
        body = inner[:-1] + b', "pad": "' + b"x" * (size - len(inner) - 11) + b'"}'
        assert len(body) == size > MAX_BODY
        return self.rpc(ns, body, "body over 1 MiB")

    def valid(self) -> Framed:
        ns = self.namespace()
        return self.rpc(ns, json.dumps(self.envelope(ns)).encode(), "valid envelope")

    def framed(self) -> Framed:
        makers: list[tuple[float, Callable[[], Framed]]] = [
            (10, self.invalid_json), (0.3, self.deep_json), (10, self.wrong_shape),
            (22, self.wrong_type), (7, self.missing_or_extra), (6, self.unknown_op),
            (3, self.version), (2, self.deadline), (6, self.unknown_namespace), (10, self.bad_id),
            (4, self.bad_path), (6, self.wrong_method), (8, self.bad_token),
            (4, self.ids_endpoint), (0.6, self.huge_header), (0.6, self.big_body), (3, self.valid),
        ]
        return self.rng.choices([m for _, m in makers], [w for w, _ in makers])[0]()

    # -- raw byte streams

    def request_bytes(self, method: str = "POST", path: str | None = None, body: bytes | None = None,
                      extra: bytes = b"", token: bool = True) -> bytes:
        ns = self.namespace()
        path = path or f"/rpc/{ns}/{self.good_id(ns)}"
        body = json.dumps(self.envelope(ns)).encode() if body is None else body
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode("latin-1")
                + (f"Authorization: Bearer {TOKEN}\r\n".encode() if token else b"")
                + b"Content-Type: application/json\r\n" + extra)
        if b"content-length" not in extra.lower() and b"transfer-encoding" not in extra.lower():
            head += b"Content-Length: %d\r\n" % len(body)
        return head + b"\r\n" + body

    def raw(self) -> Raw:
        c = self.rng.randrange(16)
        ns = self.namespace()
        gid = self.good_id(ns)
        if c == 0:
            return Raw(self.junk_bytes(self.rng.randint(1, 2000)), "garbage bytes")
        if c == 1:
            return Raw(self.rng.choice([
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + self.junk_bytes(200),
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + self.junk_bytes(40),
                b"SSH-2.0-OpenSSH_9.6\r\n", b"\r\n\r\n\r\n", b"\x00" * 100,
                b"HELO example.com\r\n", b"GET\r\n\r\n", b"GET / HTTP/1.1\n\n",
            ]), "foreign protocol")
        if c == 2:
            full = self.request_bytes()
            cut = self.rng.randrange(1, len(full))
            return Raw(full[:cut], f"truncated at {cut}")
        if c == 3:
            line = self.rng.choice([
                f"POST /rpc/{ns}/{gid} HTTP/9.9", f"POST /rpc/{ns}/{gid} HTTX/1.1",
                f"post /rpc/{ns}/{gid} HTTP/1.1", f"POST  /rpc/{ns}/{gid}  HTTP/1.1",
                f"POST /rpc/{ns}/{gid}", f"POST /rpc/{ns}/..\x00/{gid} HTTP/1.1",
                f"POST /rpc/{ns}/{gid}\x00 HTTP/1.1", f"POST /rpc/{ns}/../../{gid} HTTP/1.1",
                f"POST /rpc/{ns}/a b HTTP/1.1", f"POST http://x/rpc/{ns}/{gid} HTTP/1.1",
                "OPTIONS * HTTP/1.1", f"P\x00ST /rpc/{ns}/{gid} HTTP/1.1",
                f"POST /rpc/{ns}/{gid}\rX HTTP/1.1", f"POST /rpc/{ns}/{'a' * 20000} HTTP/1.1",
                f"POST /rpc/{ns}/{gid} HTTP/1.0", f"POST rpc/{ns}/{gid} HTTP/1.1",
                f"POST /rpc/{ns}/\u00e9\u00e9 HTTP/1.1", f"POST /rpc/{ns}/{gid}#frag HTTP/1.1",
            ])
            body = json.dumps(self.envelope(ns)).encode()
            return Raw(line.encode("latin-1") + b"\r\nHost: x\r\nAuthorization: Bearer "
                       + TOKEN.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body,
                       "bad request line")
        if c == 4:
            extra = self.rng.choice([
                b"Bad Header\r\n", b"X-A : b\r\n", b"X-A: b\r\n c\r\n", b"X-\x01: y\r\n",
                b"X-A: \x00\r\n", b": empty-name\r\n", b"Content-Length: 5\r\nContent-Length: 6\r\n",
                b"Content-Length: -1\r\n", b"Content-Length: abc\r\n", b"Content-Length: +5\r\n",
                b"Content-Length: 99999999999999999999999\r\n",
                b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                b"Transfer-Encoding: gzip\r\n", b"Transfer-Encoding: chunked, chunked\r\n",
                b"Expect: 100-continue\r\n", b"Connection: close\r\n", b"Connection: upgrade\r\n"
                b"Upgrade: websocket\r\n", b"Host: a\r\nHost: b\r\n", b"X-A: b\n",
                b"Authorization: Bearer " + OPERATOR.encode() + b"\r\n",
            ])
            return Raw(self.request_bytes(extra=extra), "bad header")
        if c == 5:
            chunks = self.rng.choice([
                b"zz\r\nabc\r\n0\r\n\r\n", b"5\r\nabc\r\n0\r\n\r\n", b"-1\r\n\r\n",
                b"ffffffffffffffffff\r\n", b"3;ext\r\n{}}\r\n0\r\n\r\n", b"0\r\n\r\n",
                b"2\r\n{}\r\n0\r\nTrailer: x\r\n\r\n",
            ])
            return Raw(self.request_bytes(body=chunks, extra=b"Transfer-Encoding: chunked\r\n"),
                       "bad chunked body")
        if c == 6:
            chunk = b"x" * 65536
            n = MAX_BODY // len(chunk) + 2
            body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(n)) + b"0\r\n\r\n"
            return Raw(self.request_bytes(body=body, extra=b"Transfer-Encoding: chunked\r\n"),
                       "chunked body over 1 MiB")
        if c == 7:
            reqs = [self.request_bytes() if self.rng.random() < 0.5 else self.junk_request()
                    for _ in range(self.rng.choice([2, 3, 6, 40, 90]))]
            return Raw(b"".join(reqs), "pipelined mix")
        if c == 8:
            return Raw(self.request_bytes(
                method="CONNECT", path="127.0.0.1:22", body=b""), "CONNECT")
        if c == 9:
            return Raw(self.request_bytes(extra=self.rng.choice([
                b"Connection: Upgrade\r\nUpgrade: websocket\r\n",
                b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMA\r\n",
            ])), "upgrade")
        if c == 10:
            return Raw(self.request_bytes(token=False), "raw no token")
        if c == 11:
            name = self.rng.choice(["..%2F..", "%00", "a\x00b", "%C0%AE%C0%AE%2F", "%%%", "a" * 3000])
            return Raw(self.request_bytes(method="GET", body=b"", path=f"/ids/{ns}/by-name/{name}"),
                       "raw ids", ids_ok=True)
        if c == 12:
            return Raw(self.request_bytes(extra=b"X-Big: " + b"b" * 20_000 + b"\r\n"),
                       "raw huge header")
        if c == 13:
            return Raw(self.request_bytes(body=b"", extra=b"Content-Length: %d\r\n" % (
                MAX_BODY + self.rng.randint(1, 10**9))), "announced body over 1 MiB")
        if c == 14:
            full = self.request_bytes()
            return Raw(full[: self.rng.randrange(1, len(full))], "truncated, no EOF",
                       half_close=False)
        return Raw(self.junk_bytes(self.rng.randint(1, 300)), "garbage, no EOF", half_close=False)

    def junk_request(self) -> bytes:
        ns = self.namespace()
        return self.request_bytes(body=self.rng.choice([
            b"{", b"[]", b"null", b'{"v":2}', json.dumps(self.json_value()).encode()]),
            path=self.rng.choice([f"/rpc/{ns}/{self.good_id(ns)}", f"/rpc/{ns}/..%2f",
                                  "/nowhere"]))

    def slow(self) -> Raw:
        ns = self.namespace()
        body = json.dumps(self.envelope(ns)).encode()
        full = self.request_bytes(body=body)
        head_len = len(full) - len(body)
        if self.rng.random() < 0.75:
            cut = head_len + self.rng.randrange(0, len(body) // 2 + 1)   # half a body
            return Raw(full[:cut], "slow client: half a body, then silence", half_close=False)
        return Raw(full[: self.rng.randrange(1, head_len - 2)], "slow client: half a head",
                   half_close=False)


# ---- talking to the node ---------------------------------------------------------------------


class _Responses:
    """Collects responses parsed by httptools from whatever the server wrote."""

    def __init__(self) -> None:
        self.items: list[tuple[int, bytes]] = []
        self.body: list[bytes] = []
        self.in_message = False
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.in_message = True
        self.body = []

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.in_message = False
        self.items.append((self.parser.get_status_code(), b"".join(self.body)))


async def raw_exchange(port: int, case: Raw, bound_s: float) -> tuple[list[tuple[int, bytes]], str]:
    """Write the bytes, then read until the server closes; '' or a reason the exchange was bad."""
    got = _Responses()
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        try:
            await stream.send(case.data)
            if case.half_close:
                await stream.send_eof()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass    # the server already answered and closed: read what it wrote
        try:
            with anyio.fail_after(bound_s):
                while True:
                    got.parser.feed_data(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass
        except TimeoutError:
            return got.items, f"the server did not close the connection within {bound_s} s"
        except httptools.HttpParserError as exc:
            return got.items, f"the server's answer is not valid HTTP: {exc}"
    if got.in_message:
        return got.items, "the server closed in the middle of an answer"
    return got.items, ""


async def run_workers(n: int, jobs: list[Any], work: Callable[[Any], Any]) -> None:
    it = iter(jobs)

    async def worker() -> None:
        for job in it:
            await work(job)

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(worker)


async def setup_ids(live: Live) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Per namespace: two initialised objects (owner acme/i1) and two that were never initialised."""
    ids: dict[str, list[str]] = {}
    inits = {ns: next(r for r in reqs if r["op"] == "init") for ns, reqs in OPS.items()}
    for ns, init in inits.items():
        ids[ns] = []
        for i in range(4):
            status, body = await live.req("POST", f"/ids/{ns}/unique")
            assert status == 200, body
            oid = json.loads(body)["id"]
            ids[ns].append(oid)
            if i < 2:
                env = {"v": 1, "tenant_id": "acme", "identity_id": "i1", "request_id": "req_setup",
                       "deadline_ms": FAR, "req": init}
                status, body = await live.req("POST", f"/rpc/{ns}/{oid}", json.dumps(env).encode())
                assert status == 200 and b'"ok"' in body, body
    names = list(ids)
    foreign = {ns: ids[names[(i + 1) % len(names)]][0] for i, ns in enumerate(names)}
    return ids, foreign


# ---- the tests -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_deeply_nested_json_is_invalid_request_not_a_crash(live: Live) -> None:
    """A body of JSON arrays nested a few thousand deep is a handled invalid_request, not an
    internal_error from a recursion overflow (RPC-7, REL-2)."""
    ns = "tenant_quota"
    status, body = await live.req("POST", f"/ids/{ns}/unique")
    oid = json.loads(body)["id"]
    for key in ("req", "v", "extra"):
        depth = 5_000
        payload = b'{"v":1,"' + key.encode() + b'":' + b"[" * depth + b"]" * depth + b"}"
        status, out = await live.req("POST", f"/rpc/{ns}/{oid}", payload)
        reply = json.loads(out)
        assert (status, reply.get("err", {}).get("code")) == (200, "invalid_request"), (key, out)


@pytest.mark.anyio
async def test_fuzzed_malformed_requests_get_documented_answers(live: Live, tmp_path: Path) -> None:
    """Thousands of malformed requests (garbage bytes, bad framing, huge heads and bodies, bad
    JSON, wrong shapes and types, unknown ops and namespaces, hostile ids, wrong methods and
    tokens, slow clients) each get a documented status and error code, never a stack trace, and
    the node keeps serving and writes only inside its data directory (RPC-7, REL-2, REL-3)."""
    rng = random.Random(SEED)
    data_dir = live.rt.data_dir.resolve()
    parent = tmp_path.parent
    before = listing(parent)
    ids, foreign = await setup_ids(live)
    gen = Gen(rng, ids, foreign)
    findings = Findings(SEED, (str(ROOT), str(tmp_path), str(data_dir)))
    framed = [gen.framed() for _ in range(N_FRAMED)]
    raws = [gen.raw() for _ in range(N_RAW)]
    slows = [gen.slow() for _ in range(N_SLOW)]
    health_every = 250
    served = {"framed": 0, "raw": 0}

    async def health(where: str) -> None:
        try:
            status, body = await live.req("GET", "/healthz", token=None)
        except HttpTransportError as exc:
            findings.fail(where, f"/healthz did not answer: {exc!r}")
            return
        if status != 200 or json.loads(body).get("status") != "ok":
            findings.fail(where, f"/healthz answered {status}: {body[:200]!r}")

    async def send_framed(case: Framed) -> None:
        served["framed"] += 1
        try:
            status, body = await live.pool.request(live.url, case.method, case.path, case.headers,
                                                   case.body, timeout_s=10)
        except HttpTransportError as exc:
            findings.fail(case.describe(), f"no HTTP answer to a well-framed request: {exc!r}")
            return
        findings.check(status, body, case.describe(), ids_ok=case.path.startswith("/ids/"))
        if served["framed"] % health_every == 0:
            await health(f"after {served['framed']} framed requests")

    async def send_raw(case: Raw) -> None:
        served["raw"] += 1
        bound = 5.0 if case.half_close else REQUEST_TIMEOUT_S + 4.5
        try:
            answers, problem = await raw_exchange(live.port, case, bound)
        except OSError as exc:
            findings.fail(case.describe(), f"could not connect: {exc!r}")
            return
        if problem:
            findings.fail(case.describe(), problem)
        if not answers:
            findings.closed_without_answer += 1
        for status, body in answers:
            if status == 100 and not body:
                continue    # the interim answer to "Expect: 100-continue"
            findings.check(status, body, case.describe(), ids_ok=case.ids_ok)
        if served["raw"] % health_every == 0:
            await health(f"after {served['raw']} raw connections")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_workers, 24, framed, send_framed)
            tg.start_soon(run_workers, 16, raws, send_raw)
            tg.start_soon(run_workers, len(slows), slows, send_raw)

    await health("after the whole run")
    status, metrics = await live.req("GET", "/metrics", token=None)
    assert status == 200
    for marker in (b"passwd", b"%2e", b"\x00", b"acme", b"req_", b"Bearer", TOKEN.encode()):
        assert marker not in metrics, f"/metrics shows request content {marker!r} (seed {SEED})"
    total = len(framed) + len(raws) + len(slows)
    assert total >= 5000
    assert findings.answers >= N_FRAMED, findings.report()
    outside = sorted(str(p) for p in listing(parent) - before
                     if not p.resolve().is_relative_to(data_dir))
    assert not outside, f"files written outside the data directory (seed {SEED}): {outside[:20]}"
    assert not list((tmp_path / "cwd").iterdir()), f"files written in the cwd (seed {SEED})"
    assert not findings.failures, findings.report()
