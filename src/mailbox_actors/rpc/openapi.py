"""The published contract (RPC-10): an OpenAPI 3.1 document generated from the wire types.

Every envelope, request, reply and error body comes from the msgspec Structs the node decodes and
encodes, so the document cannot drift from the code; ``openapi.json`` at the repository root is this
output, checked in, and a test keeps the two equal. For wire behaviour the document wins.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import msgspec

from mailbox_actors.runtime.actor import Actor
from mailbox_actors.wire.carrier import InspectionPage
from mailbox_actors.wire.envelope import Envelope
from mailbox_actors.wire.errors import ErrorBody, ErrorCode
from mailbox_actors.wire.shared_replies import IdReply

__all__ = ["openapi_document", "openapi_json"]

_REF = "#/components/schemas/{name}"


def _err(description: str, code: ErrorCode) -> dict[str, Any]:
    return {
        "description": f"{description} (code `{code.value}`)",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrResult"}}},
    }


def reply_name(t: Any) -> str:
    """A reply type's name in the document; ``X | None`` (an op that may answer null) is
    ``XOrNull``."""
    args = getattr(t, "__args__", None)
    if args and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return "".join(a.__name__ for a in inner) + "OrNull"
    return str(t.__name__)


def openapi_document(objects: Sequence[type[Actor]], version: str) -> dict[str, Any]:
    types: list[Any] = [ErrorBody, IdReply, InspectionPage]
    types += [Envelope[cls.requests] for cls in objects]  # type: ignore[name-defined]
    for cls in objects:
        types.extend(cls.replies.values())
    schemas, components = msgspec.json.schema_components(types, ref_template=_REF)
    replies_start = 3 + len(objects)
    for t, schema in zip(types[replies_start:], schemas[replies_start:], strict=True):
        if reply_name(t).endswith("OrNull"):
            components[reply_name(t)] = schema
    # msgspec names a generic instance after its type arguments; give envelopes readable names.
    renames = {}
    inspection_schema = schemas[2]
    schemas = schemas[:2] + schemas[3:]
    for cls, schema in zip(objects, schemas[2:2 + len(objects)], strict=True):
        old = schema["$ref"].rsplit("/", 1)[1]
        renames[old] = f"{cls.__name__}Envelope"
        components[renames[old]] = components.pop(old)
        schema["$ref"] = _REF.format(name=renames[old])
    components["ErrResult"] = {
        "type": "object", "required": ["err"], "additionalProperties": False,
        "properties": {"err": {"$ref": "#/components/schemas/ErrorBody"}},
    }
    auth_errors = {
        "401": _err("Missing or wrong cluster token", ErrorCode.UNAUTHENTICATED),
        "403": _err("The operator token was sent where the cluster token is needed",
                    ErrorCode.PERMISSION_DENIED),
    }
    paths: dict[str, Any] = {}
    id_param = {"name": "object_id", "in": "path", "required": True,
                "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}
    for cls, envelope_schema in zip(objects, schemas[2:2 + len(objects)], strict=False):
        ok_types = list(dict.fromkeys(cls.replies.values()))
        # anyOf: one op may answer X and another X-or-null.
        ok_schema = {"anyOf": [{"$ref": _REF.format(name=reply_name(t))} for t in ok_types]}
        components[f"{cls.__name__}OkResult"] = {
            "type": "object", "required": ["ok"], "additionalProperties": False,
            "properties": {"ok": ok_schema},
        }
        ops = ", ".join(f"`{op}` -> {reply_name(t)}" for op, t in cls.replies.items())
        paths[f"/rpc/{cls.namespace}/{{object_id}}"] = {"post": {
            "operationId": f"rpc_{cls.namespace}",
            "summary": f"Call a {cls.__name__} ({cls.namespace})",
            "description": (f"Ops and their `ok` replies: {ops}. A handled request, success or "
                            "error, is HTTP 200 with `{\"ok\": ...}` or `{\"err\": ...}`."),
            "security": [{"clusterToken": []}],
            "parameters": [id_param],
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": envelope_schema}}},
            "responses": {
                "200": {"description": "Handled: `ok` or `err`", "content": {"application/json": {
                    "schema": {"oneOf": [
                        {"$ref": f"#/components/schemas/{cls.__name__}OkResult"},
                        {"$ref": "#/components/schemas/ErrResult"}]}}}},
                **auth_errors,
                "404": _err("Unknown path", ErrorCode.INVALID_REQUEST),
                "405": _err("Wrong method", ErrorCode.METHOD_NOT_ALLOWED),
                "413": _err("Body over the limit", ErrorCode.PAYLOAD_TOO_LARGE),
            },
        }}
        id_ok = {"200": {"description": "The id", "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/IdReply"}}}}, **auth_errors,
            "400": _err("Bad name", ErrorCode.INVALID_REQUEST)}
        paths[f"/ids/{cls.namespace}/by-name/{{name}}"] = {"get": {
            "operationId": f"id_by_name_{cls.namespace}",
            "summary": f"The {cls.namespace} id for a name (deterministic)",
            "security": [{"clusterToken": []}],
            "parameters": [{"name": "name", "in": "path", "required": True,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 1024}}],
            "responses": id_ok}}
        paths[f"/ids/{cls.namespace}/unique"] = {"post": {
            "operationId": f"id_unique_{cls.namespace}",
            "summary": f"Mint a new unique {cls.namespace} id",
            "security": [{"clusterToken": []}], "responses": id_ok}}
    paths["/admin/deliveries/{object_id}"] = {"get": {
        "operationId": "admin_deliveries",
        "summary": "Operator inspection of an IdentityMailbox's Emails and Post jobs (CA-10, PO-7)",
        "description": ("A read-only page: a call reads at most `limit` rows (32 by default), "
                        "never more than 64 in all (a page's first record is read whole), so "
                        "it holds at most that many records; continue with `after` = the last "
                        "page's `next_cursor` until it is null (a last page may be empty). It "
                        "opens no owner, creates nothing and arms nothing; records (`kind` "
                        "email or post, in one key order) never carry addresses, events, bodies "
                        "or headers. An id with no file, or a file without delivery tables, is "
                        "`uninitialized`. Needs the operator token."),
        "security": [{"operatorToken": []}],
        "parameters": [id_param,
                       {"name": "after", "in": "query", "required": False,
                        "schema": {"type": "string", "maxLength": 200}},
                       {"name": "limit", "in": "query", "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 64,
                                   "default": 32}}],
        "responses": {
            "200": {"description": "`available` with records, or `uninitialized` (no file, or "
                                   "no delivery tables)",
                    "content": {"application/json": {"schema": inspection_schema}}},
            "400": _err("Bad id, cursor or limit", ErrorCode.INVALID_REQUEST),
            "401": _err("Missing or wrong operator token", ErrorCode.UNAUTHENTICATED),
            "403": _err("The cluster token was sent where the operator token is needed",
                        ErrorCode.PERMISSION_DENIED),
        }}}
    # Any Carrier user's (CA-15): a Notifier's, a user's own actor's, by its namespace.
    any_user = dict(paths["/admin/deliveries/{object_id}"]["get"])
    any_user.update(
        operationId="admin_deliveries_of_namespace",
        summary="Operator inspection of any Carrier user's Emails and Post jobs (CA-10, CA-15)",
        parameters=[{"name": "namespace", "in": "path", "required": True,
                     "schema": {"type": "string", "maxLength": 64}},
                    *any_user["parameters"]])
    paths["/admin/deliveries/{namespace}/{object_id}"] = {"get": any_user}
    paths.update(_inspection_paths(components))
    paths["/healthz"] = {"get": {
        "operationId": "healthz", "summary": "Liveness (no token): whether this process serves",
        "responses": {"200": {"description": "JSON: status (ok or stopping), node name, pid",
                              "content": {"application/json": {"schema": {
                                  "type": "object", "required": ["status", "node", "pid"],
                                  "properties": {"status": {"enum": ["ok", "stopping"]},
                                                 "node": {"type": "string"},
                                                 "pid": {"type": "integer"}}}}}}}}}
    paths["/admin/status"] = {"get": {
        "operationId": "admin_status",
        "summary": "The node's state for operators: actors, alarms, queues, limits",
        "description": ("What `mailbox-actors status` shows: active actors, pending and fired "
                        "alarms, activations, evictions, queue depths, the descriptor limit and "
                        "the bound on open actors it gives, the data directory."),
        "security": [{"operatorToken": []}],
        "responses": {
            "200": {"description": "JSON object", "content": {"application/json": {
                "schema": {"type": "object", "required": ["status", "node", "pid"]}}}},
            "401": _err("Missing or wrong operator token", ErrorCode.UNAUTHENTICATED),
            "403": _err("The cluster token was sent where the operator token is needed",
                        ErrorCode.PERMISSION_DENIED),
            "405": _err("Wrong method", ErrorCode.METHOD_NOT_ALLOWED)}}}
    paths["/metrics"] = {"get": {
        "operationId": "metrics", "summary": "Prometheus text format (no token)",
        "responses": {"200": {"description": "Prometheus text exposition format 0.0.4",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}}}}
    paths["/openapi.json"] = {"get": {
        "operationId": "openapi", "summary": "This document",
        "responses": {"200": {"description": "OpenAPI 3.1",
                              "content": {"application/json": {"schema": {"type": "object"}}}}}}}
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "mailbox-actors node", "version": version,
                 "description": "RPC to actors emulating Durable Objects. Envelope version 1."},
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {
                "clusterToken": {"type": "http", "scheme": "bearer",
                                 "description": "The cluster token (DATA/cluster.token)"},
                "operatorToken": {"type": "http", "scheme": "bearer",
                                  "description": "The operator token (DATA/operator.token)"},
            },
        },
    }
    text = json.dumps(doc)
    for old, new in renames.items():
        text = text.replace(f'"{_REF.format(name=old)}"', f'"{_REF.format(name=new)}"')
    return cast(dict[str, Any], json.loads(text))


def _inspection_paths(components: dict[str, Any]) -> dict[str, Any]:
    """UI-1's endpoints (``node.inspection_http``); their reply types join ``components``."""
    from mailbox_actors.wire import inspection as wi
    from mailbox_actors.wire.sources import AttachmentContent, RawSource

    types = [wi.NamespacesView, wi.ActorsPage, wi.ActorDetail, wi.RowsPage, wi.KvPage,
             wi.OutboxPage, wi.DeadLettersPage, wi.Redrive, wi.RedriveReply, wi.EventsPage,
             RawSource, AttachmentContent]
    schemas, more = msgspec.json.schema_components(types, ref_template=_REF)
    components.update(more)
    ns = {"name": "namespace", "in": "path", "required": True,
          "schema": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,63}$"}}
    oid = {"name": "id", "in": "path", "required": True,
           "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}
    table = {"name": "table", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,127}$"}}
    cursor = {"name": "cursor", "in": "query", "required": False,
              "description": "`next_cursor` of the previous page of the same listing",
              "schema": {"type": "string", "maxLength": 2048}}
    limit = {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}}
    message_id = {"name": "message_id", "in": "path", "required": True,
                  "schema": {"type": "string", "minLength": 1, "maxLength": 64}}
    part = {"name": "part", "in": "path", "required": True,
            "schema": {"type": "integer", "minimum": 0, "maximum": 10_000}}
    chunk = {"name": "chunk", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 0, "default": 0}}
    queue = {"name": "queue", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,62}$"}}
    tenant = {"name": "tenant", "in": "query", "required": True,
              "description": "the tenant's id (ten_...) or name", "schema": {"type": "string"}}
    content = {"name": "content", "in": "query", "required": False,
               "description": "1: show text and bytes as stored (dev mode on loopback only)",
               "schema": {"type": "string", "enum": ["0", "1", "true", "false"]}}
    errors = {
        "400": _err("Bad namespace, id, table, cursor or limit", ErrorCode.INVALID_REQUEST),
        "401": _err("Missing or wrong operator token", ErrorCode.UNAUTHENTICATED),
        "403": _err("The cluster token was sent where the operator token is needed, or content "
                    "asked for outside dev mode", ErrorCode.PERMISSION_DENIED),
        "503": _err("A node holding part of the answer cannot be reached now",
                    ErrorCode.UNAVAILABLE)}

    def get(op: str, summary: str, schema: Any, params: list[Any], found: bool) -> Any:
        responses = {"200": {"description": "JSON", "content": {"application/json": {
            "schema": schema}}}, **errors}
        if found:
            responses["404"] = _err("No such actor (its `*_not_found` code)",
                                    ErrorCode.IDENTITY_NOT_FOUND)
        return {"get": {"operationId": op, "summary": summary, "parameters": params,
                        "description": "Read-only: never activates an actor nor changes its "
                        "file (UI-1, CA-10). Needs the operator token.",
                        "security": [{"operatorToken": []}], "responses": responses}}

    return {
        "/admin/inspect": get("admin_inspect", "Each namespace's actors, active actors and "
                              "alarms pending and overdue, over the cluster", schemas[0], [],
                              False),
        "/admin/actors/{namespace}": get(
            "admin_actors", "A page of a namespace's actors across the nodes, in id order",
            schemas[1], [ns, cursor, limit], False),
        "/admin/actors/{namespace}/{id}": get(
            "admin_actor", "One actor: runtime meta, alarm and purposes, tables, KV and outbox "
            "counts", schemas[2], [ns, oid], True),
        "/admin/actors/{namespace}/{id}/rows/{table}": get(
            "admin_actor_rows", "A page of one table's rows in key order", schemas[3],
            [ns, oid, table, cursor, limit, content], True),
        "/admin/actors/{namespace}/{id}/kv": get(
            "admin_actor_kv", "A page of the actor's KV, values decoded", schemas[4],
            [ns, oid, cursor, limit, content], True),
        "/admin/actors/{namespace}/{id}/outbox": get(
            "admin_actor_outbox", "The actor's outbox newest first, pending and dispatched",
            schemas[5], [ns, oid, cursor, limit], True),
        "/admin/queues/{queue}/dead-letters": get(
            "admin_dead_letters", "A page of a queue's dead letters: reason, attempts (UI-3)",
            schemas[6], [queue, cursor, limit], False),
        "/admin/queues/{queue}/redrive": {"post": {
            "operationId": "admin_redrive",
            "summary": "Send dead letters back to their queue, attempts started again (UI-3)",
            "description": "The letters named by `message_ids`, or the oldest `limit`; one "
                           "already redriven is skipped. Needs the operator token.",
            "security": [{"operatorToken": []}], "parameters": [queue],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": schemas[7]}}},
            "responses": {"200": {"description": "JSON", "content": {"application/json": {
                "schema": schemas[8]}}}, **errors}}},
        "/admin/actors/identity_mailbox/{id}/messages/{message_id}/raw": get(
            "admin_message_raw", "A message's raw source, a chunk (1 MB) at a time (UI-2; dev "
            "mode only, else 403)", schemas[10], [oid, message_id, chunk], True),
        "/admin/actors/identity_mailbox/{id}/messages/{message_id}/attachments/{part}": get(
            "admin_message_attachment", "An attachment's content, a chunk (1 MB) at a time "
            "(UI-2; dev mode only, else 403)", schemas[11], [oid, message_id, part, chunk], True),
        "/admin/events": get(
            "admin_events", "A tenant's indexed events after a cursor, in index order (UI-3)",
            schemas[9], [tenant, cursor, limit], False),
    }


def openapi_json(objects: Sequence[type[Actor]], version: str) -> bytes:
    """The document as canonical, stable JSON (sorted keys, two-space indent, final newline)."""
    return (json.dumps(openapi_document(objects, version), indent=2, sort_keys=True)
            + "\n").encode()

