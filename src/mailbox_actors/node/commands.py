"""Operator commands over the network (CL-3): ``status``, ``id`` and ``call``.

Each reads the cluster description and tokens from the data directory (or takes a URL), talks to
the nodes through the project's client, and prints. Exit status: 0 ok, 1 an ``err`` result or an
unreachable node, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec

from mailbox_actors.rpc.client import Client, RpcError
from mailbox_actors.rpc.http_client import HttpPool

__all__ = ["add_call_arguments", "add_id_arguments", "add_openapi_arguments", "add_status_arguments",
           "run_call", "run_id", "run_openapi", "run_status"]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default="./data",
                   help="the cluster's (or node's) data directory (default ./data)")
    p.add_argument("--url", help="a single node's URL when DATA has no cluster.json "
                   "(default http://127.0.0.1:8787)")


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    _add_target(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")


def add_id_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace")
    p.add_argument("--name", required=True, help="the object's name")
    _add_target(p)


def add_call_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace")
    p.add_argument("object", metavar="ID_OR_NAME", help="a 64-hex object id, or a name")
    p.add_argument("request", metavar="JSON", help='the request, e.g. \'{"op":"status"}\'')
    p.add_argument("--tenant", help="tenant_id for the envelope")
    p.add_argument("--identity", help="identity_id for the envelope")
    _add_target(p)


def _client(args: argparse.Namespace) -> Client:
    kw = {"url": args.url} if args.url else {}
    return Client.from_data_dir(args.data, **kw)


def _fail(cmd: str, text: str, status: int) -> int:
    print(f"mailbox-actors {cmd}: {text}", file=sys.stderr)
    return status


def run_id(args: argparse.Namespace) -> int:
    async def go() -> str:
        async with _client(args) as c:
            return await c.id_from_name(args.namespace, args.name)
    try:
        print(anyio.run(go))
    except FileNotFoundError as e:
        return _fail("id", f"no token in {args.data} ({e.filename}); start the cluster first or "
                     "pass --data", 2)
    except RpcError as e:
        return _fail("id", f"{e.code.value}: {e.message}", 1)
    return 0


def run_call(args: argparse.Namespace) -> int:
    try:
        req = json.loads(args.request)
    except json.JSONDecodeError as e:
        return _fail("call", f"JSON is not valid JSON: {e}", 2)
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        return _fail("call", 'JSON must be an object with an "op", e.g. {"op":"status"}', 2)

    async def go() -> Any:
        async with _client(args) as c:
            oid = args.object if _HEX64.match(args.object) else await c.id_from_name(
                args.namespace, args.object)
            return await c.call(args.namespace, oid, req, tenant_id=args.tenant,
                                identity_id=args.identity)
    try:
        result = anyio.run(go)
    except FileNotFoundError as e:
        return _fail("call", f"no token in {args.data} ({e.filename}); start the cluster first "
                     "or pass --data", 2)
    except RpcError as e:
        print(json.dumps({"err": msgspec.to_builtins(e.to_body())}))
        return 1
    print(json.dumps({"ok": result}))
    return 0


def run_status(args: argparse.Namespace) -> int:
    data = Path(args.data)
    try:
        operator = (data / "operator.token").read_text().strip()
    except FileNotFoundError:
        return _fail("status", f"no operator token in {data}; start the cluster first or pass "
                     "--data", 2)
    try:
        nodes = [(n["name"], n["url"]) for n in json.loads((data / "cluster.json").read_text())[
            "nodes"]]
    except FileNotFoundError:
        nodes = [("node-0", args.url or "http://127.0.0.1:8787")]

    async def go() -> list[dict[str, Any]]:
        out = []
        async with HttpPool() as pool:
            for name, url in nodes:
                try:
                    status, body = await pool.request(
                        url, "GET", "/admin/status", {"authorization": f"Bearer {operator}"}, b"",
                        timeout_s=5.0)
                    row = json.loads(body) if status == 200 else {"status": f"HTTP {status}"}
                except (OSError, ConnectionError, TimeoutError):
                    row = {"status": "unreachable"}
                out.append({"name": name, "url": url} | row)
        return out
    rows = anyio.run(go)
    if args.json:
        print(json.dumps({"nodes": rows}, indent=2))
    else:
        print(f"{'node':8} {'status':12} {'pid':>8} {'actors':>8} {'alarms':>8}  url")
        for r in rows:
            print(f"{r['name']:8} {r.get('status', '?'):12} {r.get('pid', '-')!s:>8} "
                  f"{r.get('actors_active', '-')!s:>8} {r.get('alarms_pending', '-')!s:>8}  "
                  f"{r['url']}")
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


def add_openapi_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", help="write here instead of standard output")


def run_openapi(args: argparse.Namespace) -> int:
    """Print the OpenAPI document of this version (the checked-in openapi.json is this)."""
    from mailbox_actors.node.serve import package_version
    from mailbox_actors.objects import DEFAULT_OBJECTS
    from mailbox_actors.rpc.openapi import openapi_json

    doc = openapi_json(DEFAULT_OBJECTS, package_version())
    if args.output:
        Path(args.output).write_bytes(doc)
    else:
        sys.stdout.buffer.write(doc)
    return 0
