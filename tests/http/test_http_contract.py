"""The published contract drives a live node: envelopes generated from ``openapi.json`` are posted
over real sockets and every answer must be what the document promises (RPC-7, RPC-10, REL-2).

Strategies come from the document's own schemas. hypothesis-jsonschema builds the leaf schemas
(strings, integers, enums, null); objects and unions are assembled here, because
hypothesis-jsonschema 0.23.1's object strategy calls a Hypothesis internal (``many.more``) that the
installed Hypothesis no longer has. The node runs in a blocking portal so Hypothesis drives plain
functions and the whole run can be checked for coverage afterwards.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from jsonschema import Draft202012Validator

from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.rpc.openapi import openapi_json
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import ErrorCode

TOKEN = "cluster-token-0123456789abcdef"
OPERATOR = "operator-token-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]
DOC: dict[str, Any] = json.loads((ROOT / "openapi.json").read_text())
COMPONENTS: dict[str, Any] = DOC["components"]
SCHEMAS: dict[str, Any] = COMPONENTS["schemas"]
FAR = 2**52
EXAMPLES = 120
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


# ---- reading the document --------------------------------------------------------------------


def resolve(ref: str) -> Any:
    """Follow a local JSON pointer (``#/a/b``) in the document; KeyError when it dangles."""
    assert ref.startswith("#/"), f"only local references are expected: {ref}"
    node: Any = DOC
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A validator for ``schema`` whose ``#/components/...`` references resolve in the document."""
    return Draft202012Validator({**schema, "components": COMPONENTS})


class Rpc:
    """What the document says about ``POST /rpc/{namespace}/{object_id}`` for one namespace."""

    def __init__(self, namespace: str, post: dict[str, Any]) -> None:
        self.namespace = namespace
        self.envelope_ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        self.envelope = resolve(self.envelope_ref)
        ok200 = post["responses"]["200"]["content"]["application/json"]["schema"]
        self.answer = validator(ok200)
        self.request_schema = validator({"$ref": self.envelope_ref})
        # "Ops and their `ok` replies: `init` -> InitReply, ..." names the reply of each op.
        # "... -> MessageView or null": that op may answer null too.
        self.replies = {op: validator({"oneOf": [{"$ref": f"#/components/schemas/{name}"},
                                                 *([{"type": "null"}] if null else [])]})
                        for op, name, null in re.findall(r"`(\w+)` -> (\w+)( or null)?",
                                                         post["description"])}
        self.ops = dict(self.envelope["properties"]["req"]["discriminator"]["mapping"])


RPCS: dict[str, Rpc] = {
    m.group(1): Rpc(m.group(1), item["post"])
    for path, item in DOC["paths"].items()
    if (m := re.fullmatch(r"/rpc/([a-z_]+)/\{object_id\}", path))
}


# ---- strategies from the schemas -------------------------------------------------------------

_LOOKAHEAD = re.compile(r"\(\?=[^)]*\)")
_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))


def _string_with_lookahead(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """hypothesis cannot generate from a lookahead: generate from the rest, keep what matches."""
    pattern = schema["pattern"]
    lo, hi = schema.get("minLength", 0), schema.get("maxLength", 10**9)
    return st.from_regex(_LOOKAHEAD.sub("", pattern), fullmatch=True).filter(
        lambda s: lo <= len(s) <= hi and re.search(pattern, s) is not None)


def strategy(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid against ``schema`` (the subset of JSON Schema the document uses)."""
    if "$ref" in schema:
        return strategy(resolve(schema["$ref"]))
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return st.one_of([strategy(s) for s in schema[union]])
    if schema.get("type") == "object" and "properties" in schema:
        props: dict[str, Any] = schema["properties"]
        required = set(schema.get("required", ()))
        obj = st.fixed_dictionaries(
            {k: strategy(v) for k, v in props.items() if k in required},
            optional={k: strategy(v) for k, v in props.items() if k not in required})
        if schema.get("additionalProperties", True) is False:
            return obj
        extra = st.dictionaries(st.text(min_size=1, max_size=10).filter(lambda k: k not in props),
                                _JSON_LEAF, max_size=2)
        return st.tuples(obj, extra).map(lambda t: {**t[1], **t[0]})
    if schema.get("type") == "object":  # a map: additionalProperties gives the values
        values = schema.get("additionalProperties", {})
        return st.dictionaries(st.text(min_size=1, max_size=10),
                               strategy(values) if values else _JSON_LEAF, max_size=3)
    if schema.get("type") == "string" and schema.get("contentEncoding") == "base64":
        return st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode())
    if schema.get("type") == "string" and "(?" in schema.get("pattern", ""):
        return _string_with_lookahead(schema)
    if schema.get("type") == "array" and "$ref" in schema.get("items", {}):
        # hypothesis-jsonschema cannot follow a $ref inside a leaf: draw the items here.
        return st.lists(strategy(schema["items"]), min_size=schema.get("minItems", 0),
                        max_size=min(3, schema.get("maxItems", 3)))
    return from_schema(schema)


def envelopes(rpc: Rpc, req_ref: str | None = None) -> st.SearchStrategy[dict[str, Any]]:
    schema = rpc.envelope
    if req_ref is not None:
        schema = {**schema, "properties": {**schema["properties"], "req": {"$ref": req_ref}}}
    return strategy(schema)


def cases(rpc: Rpc) -> st.SearchStrategy[tuple[Any, Any, dict[str, Any] | None,
                                               list[tuple[dict[str, Any], bool]]]]:
    """(tenant, identity, an optional init envelope first, envelopes with keep-their-deadline)."""
    props = rpc.envelope["properties"]
    return st.tuples(
        strategy(props["tenant_id"]), strategy(props["identity_id"]),
        st.none() | envelopes(rpc, rpc.ops["init"]),
        st.lists(st.tuples(envelopes(rpc), st.integers(0, 4).map(lambda n: n == 0)),
                 min_size=1, max_size=5))


# ---- the live node in a portal ---------------------------------------------------------------


class Live:
    def __init__(self, rt: TestRuntime, url: str, pool: HttpPool) -> None:
        self.rt = rt
        self.url = url
        self.pool = pool

    async def req(self, method: str, path: str, body: bytes = b"",
                  token: str | None = TOKEN) -> tuple[int, Any]:
        h = {"content-type": "application/json"}
        if token is not None:
            h["authorization"] = f"Bearer {token}"
        status, out = await self.pool.request(self.url, method, path, h, body, timeout_s=10)
        return status, json.loads(out)


@asynccontextmanager
async def serving(data_dir: Path) -> AsyncIterator[Live]:
    async with TestRuntime(data_dir) as rt:
        app = NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR,
                      openapi=openapi_json(DEFAULT_OBJECTS, "test"))
        server = RpcHttpServer(app, max_body_bytes=1 << 20, request_timeout_s=2)
        port = await server.start("127.0.0.1", 0)
        try:
            async with HttpPool() as pool:
                yield Live(rt, f"http://127.0.0.1:{port}", pool)
        finally:
            await server.stop(grace_s=1.0)


@contextmanager
def live_node(data_dir: Path) -> Iterator[tuple[BlockingPortal, Live]]:
    with start_blocking_portal("asyncio") as portal, \
            portal.wrap_async_context_manager(serving(data_dir)) as live:
        yield portal, live


def post(portal: BlockingPortal, live: Live, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    return portal.call(live.req, "POST", path, json.dumps(body).encode())


def fresh_id(portal: BlockingPortal, live: Live, namespace: str) -> str:
    status, reply = portal.call(live.req, "POST", f"/ids/{namespace}/unique")
    assert status == 200, reply
    return str(reply["id"])


# ---- the document itself ---------------------------------------------------------------------


def test_document_is_a_well_formed_openapi_31_contract() -> None:
    """The checked-in document is OpenAPI 3.1 in the basic sense: every $ref resolves, every
    operation has responses, path parameters are declared, schemas are valid JSON Schema, and
    the error codes are exactly the node's (RPC-10)."""
    assert re.fullmatch(r"3\.1\.\d+", DOC["openapi"])
    assert isinstance(DOC["info"]["title"], str) and isinstance(DOC["info"]["version"], str)
    dangling = []
    for ref in set(refs(DOC)):
        try:
            resolve(ref)
        except (KeyError, TypeError):
            dangling.append(ref)
    assert not dangling, f"unresolvable $ref: {sorted(dangling)}"
    operation_ids = []
    schemes = set(COMPONENTS.get("securitySchemes", {}))
    for path, item in DOC["paths"].items():
        assert path.startswith("/"), path
        templated = set(re.findall(r"\{(\w+)\}", path))
        operations = {m: op for m, op in item.items() if m in HTTP_METHODS}
        assert operations, f"{path} has no operation"
        for method, op in operations.items():
            where = f"{method.upper()} {path}"
            responses = op.get("responses")
            assert isinstance(responses, dict) and responses, f"{where} has no responses"
            for status, response in responses.items():
                assert re.fullmatch(r"[1-5]\d\d|[1-5]XX|default", status), (where, status)
                assert isinstance(response.get("description"), str), (where, status)
                for media in response.get("content", {}).values():
                    Draft202012Validator.check_schema(media["schema"])
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == templated, f"{where}: path parameters {declared} != {templated}"
            assert all(p["required"] is True for p in op.get("parameters", [])
                       if p["in"] == "path"), where
            for requirement in op.get("security", []):
                assert set(requirement) <= schemes, f"{where}: unknown scheme {requirement}"
            operation_ids.append(op.get("operationId"))
    assert len(operation_ids) == len(set(operation_ids)), "operationIds must be unique"
    for schema in SCHEMAS.values():
        Draft202012Validator.check_schema(schema)
    assert set(SCHEMAS["ErrorCode"]["enum"]) == {c.value for c in ErrorCode}
    assert set(RPCS) == {cls.namespace for cls in DEFAULT_OBJECTS}
    for rpc in RPCS.values():
        for op, ref in rpc.ops.items():
            assert resolve(ref)["properties"]["op"]["enum"] == [op], (rpc.namespace, op)
        assert set(rpc.replies) == set(rpc.ops), f"{rpc.namespace}: a reply per op"


# ---- generated envelopes against the live node -----------------------------------------------


def check_answer(rpc: Rpc, env: dict[str, Any], status: int, reply: Any,
                 seen: dict[str, set[str]]) -> None:
    what = f"{rpc.namespace} {json.dumps(env)[:400]} -> {status} {json.dumps(reply)[:400]}"
    assert status == 200, what
    errors = sorted(e.message for e in rpc.answer.iter_errors(reply))
    assert not errors, f"the answer does not match the document: {errors[:3]}: {what}"
    op = env["req"]["op"]
    if "ok" in reply:
        assert not list(rpc.replies[op].iter_errors(reply["ok"])), f"not a {op} reply: {what}"
        seen["ok"].add(op)
        return
    code = ErrorCode(reply["err"]["code"])
    assert code is not ErrorCode.INTERNAL_ERROR, f"internal_error: {what}"
    assert reply["err"]["retryable"] is code.retryable, what
    # The document allows this envelope, so the node must decode it: a refusal may be about the
    # state or the values (no owner, a count over the limit), never the shape of a field.
    details = reply["err"].get("details") or {}
    assert not (code in (ErrorCode.INVALID_REQUEST, ErrorCode.UNSUPPORTED_VERSION)
                and "path" in details), f"a valid envelope failed to decode: {what}"
    seen["err"].add(code.value)


@pytest.mark.parametrize("namespace", sorted(RPCS))
def test_generated_envelopes_get_documented_answers(namespace: str, tmp_path: Path) -> None:
    """Every envelope the document allows, posted with the cluster token to a fresh object, is
    answered HTTP 200 with an ``ok`` matching the op's reply schema or an ``err`` with a known
    code other than internal_error; every op succeeds at least once (RPC-7, RPC-10, REL-2)."""
    rpc = RPCS[namespace]
    seen: dict[str, set[str]] = {"ok": set(), "err": set()}
    with live_node(tmp_path / "node") as (portal, live):

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.filter_too_much])
        @given(case=cases(rpc))
        def run(case: tuple[Any, Any, dict[str, Any] | None,
                            list[tuple[dict[str, Any], bool]]]) -> None:
            tenant, identity, init, generated = case
            # A fresh object per example, called with one owner throughout: an owner mismatch
            # (internal_error by design, RPC-3) cannot happen.
            oid = fresh_id(portal, live, namespace)
            sequence = ([(init, False)] if init is not None else []) + generated
            for env, keep_deadline in sequence:
                env = {**env, "v": 1, "tenant_id": tenant, "identity_id": identity}
                if not keep_deadline:
                    env["deadline_ms"] = FAR
                assert not list(rpc.request_schema.iter_errors(env)), env  # the strategy is right
                status, reply = post(portal, live, f"/rpc/{namespace}/{oid}", env)
                check_answer(rpc, env, status, reply, seen)

        run()
        # Random sequences need not reach every op's success (status needs a prior init); one
        # canonical sequence per namespace does, through the same checks.
        oid = fresh_id(portal, live, namespace)
        answers: dict[str, Any] = {}
        for step in CANONICAL[namespace]:
            req = step(answers) if callable(step) else step  # a step may use earlier answers
            env = {"v": 1, "tenant_id": "acme", "identity_id": "i1", "request_id": "req_01CANON",
                   "deadline_ms": FAR, "req": req}
            status, reply = post(portal, live, f"/rpc/{namespace}/{oid}", env)
            check_answer(rpc, env, status, reply, seen)
            answers[req["op"]] = reply.get("ok")
    assert seen["ok"] | NEVER_OK.get(namespace, set()) == set(rpc.ops), (
        f"ops never answered ok: {set(rpc.ops) - seen['ok']}; errors seen: {seen['err']}")


_EMAIL = {"from": "a@acme.example", "to": ["b@example.com"], "text": "hi"}
# Ops no RPC sequence can make succeed: a DomainMonitor's dead letter needs a state change, which
# needs DNS answers (its post_retry answers domain_not_found for every key it can be given here).
NEVER_OK: dict[str, set[str]] = {"domain_monitor": {"post_retry"}}
_WITH_ATTACHMENT = base64.b64encode(
    b'Message-ID: <d@x>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"'
    b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b\r\nContent-Type: "
    b"application/pdf\r\nContent-Disposition: attachment; filename=a.pdf\r\n\r\nx\r\n"
    b"--b--\r\n").decode()
CANONICAL: dict[str, list[Any]] = {
    "tenant_quota": [{"op": "init", "per_minute": 5, "per_day": 10},
                     {"op": "reserve", "key": "k1"}, {"op": "usage"}, {"op": "status"},
                     {"op": "release", "reservation_id": "rsv_unknown"},
                     {"op": "post_deliver", "envelope": {
                         "key": "roster:i1:joined", "route": "member_joined", "kind": "tenant",
                         "producer": "identity_mailbox/x", "seq": 1,
                         "address": {"tenant_id": "acme"},
                         "event": {"identity_id": "i1", "mailbox_id": "a" * 64}}},
                     {"op": "roster"}],
    "identity_mailbox": [{"op": "init"}, {"op": "status"}, {"op": "post_dead_letters"},
                         {"op": "post_retry", "key": "roster:i1:joined"},
                         {"op": "emit_event", "type": "identity.renamed", "data": {"n": 1}},
                         {"op": "get_events", "after_sequence": 0},
                         {"op": "submit", "source_id": "s1", **_EMAIL},
                         {"op": "get_email", "source_id": "s1"},
                         {"op": "begin_transport", "source_id": "s1"},
                         lambda a: {"op": "record_transport_outcome",
                                    "email_id": a["begin_transport"]["email"]["email_id"],
                                    "outcome": {"kind": "outcome_unknown"}},
                         {"op": "resolve", "source_id": "s1", "outcome": "provider_accepted",
                          "provider_message_id": "p-1", "evidence": "ticket-1"},
                         lambda a: {"op": "apply_delivery_event", "type": "delivered",
                                    "message_id": a["get_email"]["messages"][0]["message_id"],
                                    "provider_event_id": "ev-1"},
                         {"op": "submit", "source_id": "s2", **_EMAIL},
                         {"op": "cancel", "source_id": "s2"},
                         {"op": "ingest", "source_id": "s1",
                          "raw": base64.b64encode(b"Message-ID: <c@x>\r\n\r\nhi").decode()},
                         {"op": "register_wait", "filter": {}, "expires_at_ms": 0},
                         lambda a: {"op": "wait_poll", "wait_id": a["register_wait"]["wait_id"]},
                         {"op": "list_messages"},
                         {"op": "ingest", "source_id": "s2", "raw": _WITH_ATTACHMENT},
                         lambda a: {"op": "attachment_text_ready", "part": 0, "text": "invoice",
                                    "message_id": a["ingest"]["message_id"]},
                         {"op": "search_messages", "query": "invoice"},
                         lambda a: {"op": "reparse", "message_id": a["ingest"]["message_id"]},
                         lambda a: {"op": "learn_message_id", "message_id": "<final@provider>",
                                    "email_id": a["get_email"]["email_id"]},
                         lambda a: {"op": "get_message", "message_id": a["ingest"]["message_id"]},
                         lambda a: {"op": "get_thread", "thread_id": a["ingest"]["thread_id"]},
                         lambda a: {"op": "get_raw_message",
                                    "message_id": a["ingest"]["message_id"]},
                         lambda a: {"op": "get_attachment", "part": 0,
                                    "message_id": a["ingest"]["message_id"]},
                         lambda a: {"op": "delete_message",
                                    "message_id": a["ingest"]["message_id"]}, {"op": "erase"}],
    "domain_monitor": [{"op": "init", "domain": "example.com"}, {"op": "check"},
                       {"op": "status"}, {"op": "post_dead_letters"}],
    "notifier": [{"op": "init"}, {"op": "status"},
                 {"op": "set_recipients", "from": "a@acme.example", "recipients": ["b@x.example"]},
                 {"op": "post_deliver", "envelope": {
                     "key": "domain:evt_1", "route": "domain_state", "kind": "tenant",
                     "producer": "domain_monitor/x", "seq": 1, "address": {"tenant_id": "acme"},
                     "event": {"domain": "example.com", "kind": "domain.failing",
                               "state": "failing", "at_ms": 0}}},
                 {"op": "get_email", "source_id": "notify:example.com:domain.failing:0"}],
}


# ---- values the document refuses -------------------------------------------------------------

_ENVELOPE = RPCS["domain_monitor"].envelope["properties"]
_PATTERNED = {
    "tenant_id": _ENVELOPE["tenant_id"]["anyOf"][0]["pattern"],
    "identity_id": _ENVELOPE["identity_id"]["anyOf"][0]["pattern"],
    "actor_key_id": _ENVELOPE["actor_key_id"]["anyOf"][0]["pattern"],
    "request_id": _ENVELOPE["request_id"]["pattern"],
    "req.domain": SCHEMAS["DomainInit"]["properties"]["domain"]["pattern"],
}


def ecma_match(pattern: str, value: str) -> bool:
    """JSON Schema patterns are ECMA-262: without the m flag, ``$`` is the end of the input only
    (Python's ``$`` also matches before a final newline)."""
    return re.search(re.sub(r"\$(?=\)|$)", r"\\Z", pattern), value) is not None


@pytest.mark.parametrize("field", sorted(_PATTERNED))
def test_values_outside_a_documented_pattern_are_refused(field: str, tmp_path: Path) -> None:
    """A value the document's pattern refuses (here: a valid value plus a final newline, which
    ECMA-262 ``$`` does not allow) is answered invalid_request at that field, not accepted as
    another owner, request id or domain (RPC-1, RPC-10, REL-2)."""
    pattern = _PATTERNED[field]
    good = {"tenant_id": "acme", "identity_id": "i1", "actor_key_id": "key-1",
            "request_id": "req_01TEST", "req.domain": "example.com"}
    with live_node(tmp_path / "node") as (portal, live):

        @settings(max_examples=15, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
        @given(value=st.sampled_from([good[field]]) | strategy(
            {"type": "string", "pattern": pattern}).filter(lambda s: ecma_match(pattern, s)))
        def run(value: str) -> None:
            bad = value + "\n"
            assert not ecma_match(pattern, bad)
            env: dict[str, Any] = {"v": 1, "tenant_id": "acme", "identity_id": "i1",
                                   "request_id": "req_01TEST", "deadline_ms": FAR,
                                   "req": {"op": "init", "domain": "example.com"}}
            if field == "req.domain":
                env["req"]["domain"] = bad
            else:
                env[field] = bad
            oid = fresh_id(portal, live, "domain_monitor")
            status, reply = post(portal, live, f"/rpc/domain_monitor/{oid}", env)
            code = reply.get("err", {}).get("code")
            assert (status, code) == (200, "invalid_request"), (
                f"{field}={bad!r} is outside the documented pattern {pattern!r} but the node "
                f"answered {reply}")
            assert reply["err"]["details"]["path"] == f"$.{field}", reply

        run()
