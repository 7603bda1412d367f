"""Operator commands over the network (CL-3): ``id`` and ``call`` (``status`` is ``cli.status``'s).

Each reads the cluster description and tokens from the data directory (or takes a URL), talks to
the nodes through the project's client, and prints. Exit status: 0 ok, 1 an ``err`` result or an
unreachable node, 2 a usage error.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from mailbox_actors.cli.data_dir import (
    add_postgres_argument,
    add_target_arguments,
    has_control_db,
    open_control_db,
)
from mailbox_actors.cli.secrets import SecretError, add_webhook_secret_arguments, webhook_secret
from mailbox_actors.platform.locks import lock_holder

if TYPE_CHECKING:  # the client (ids, clock, wire types) is imported by the commands that call
    from mailbox_actors.rpc.client import Client

__all__ = ["add_call_arguments", "add_id_arguments", "add_identity_arguments",
           "add_openapi_arguments", "add_tenant_arguments", "run_call", "run_id",
           "run_identity", "run_openapi", "run_tenant"]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def add_id_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", help="the object's namespace, e.g. tenant_quota")
    p.add_argument("--name", required=True, help="the object's name")
    add_target_arguments(p)


def add_call_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", help="the object's namespace, e.g. tenant_quota")
    p.add_argument("object", metavar="ID_OR_NAME", help="a 64-hex object id, or a name")
    p.add_argument("request", metavar="JSON", help='the request, e.g. \'{"op":"status"}\'')
    p.add_argument("--tenant", help="the envelope's tenant: a tenant's id (ten_...) or name, or "
                   "any string for objects outside the control database")
    p.add_argument("--identity", help="identity_id for the envelope")
    add_target_arguments(p)


def _client(args: argparse.Namespace) -> Client:
    # A --url may be a machine of a cluster on many machines: the client asks it for the slot
    # map once and calls each holder directly (CL-12).
    kw: dict[str, Any] = {"url": args.url, "discover": True} if args.url else {}
    if not args.url and not (Path(args.data) / "cluster.json").exists() and \
            lock_holder(Path(args.data)) is None:
        raise NoCluster(args.data)
    from mailbox_actors.rpc.client import Client

    return Client.from_data_dir(args.data, **kw)


class NoCluster(Exception):
    """Nothing runs on the data directory: said plainly, not as an unreachable node."""

    def __init__(self, data: str) -> None:
        super().__init__(f"no cluster is running on {data} (start one with 'mailbox-actors "
                         f"cluster --data {data}', or pass --url for a node elsewhere)")


def _no_token(data: str, e: FileNotFoundError) -> str:
    return (f"no token: set MAILBOX_ACTORS_TOKEN (or MAILBOX_ACTORS_TOKEN_FILE), or start the "
            f"cluster on {data} ({e.filename} does not exist)")


def _fail(cmd: str, text: str, status: int) -> int:
    print(f"mailbox-actors {cmd}: {text}", file=sys.stderr)
    return status


def run_id(args: argparse.Namespace) -> int:
    from mailbox_actors.rpc.client import RpcError

    async def go() -> str:
        async with _client(args) as c:
            return await c.id_from_name(args.namespace, args.name)
    try:
        print(anyio.run(go))
    except NoCluster as e:
        return _fail("id", str(e), 1)
    except FileNotFoundError as e:
        return _fail("id", _no_token(args.data, e), 2)
    except RpcError as e:
        return _fail("id", f"{e.code.value}: {e.message}", 1)
    return 0


def run_call(args: argparse.Namespace) -> int:
    import json

    from mailbox_actors.rpc.client import RpcError

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
            tenant = await _tenant_id(args.data, args.tenant, args.postgres)
            return await c.call(args.namespace, oid, req, tenant_id=tenant,
                                identity_id=args.identity)
    try:
        result = anyio.run(go)
    except NoCluster as e:
        return _fail("call", str(e), 1)
    except FileNotFoundError as e:
        return _fail("call", _no_token(args.data, e), 2)
    except RpcError as e:
        print(json.dumps({"err": msgspec.to_builtins(e.to_body())}))
        return 1
    print(json.dumps({"ok": result}))
    return 0


def add_openapi_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument("--objects", action="append", default=[], metavar="MODULE:CLASS",
                   help="include your own actor class's requests (repeatable), as serve does")


def run_openapi(args: argparse.Namespace) -> int:
    """Print the OpenAPI document of this version (the checked-in openapi.json is this)."""
    from mailbox_actors.cli.serve import package_version
    from mailbox_actors.node.user_objects import served_objects
    from mailbox_actors.rpc.openapi import openapi_json
    from mailbox_actors.runtime.settings import SettingsError

    try:
        objects = served_objects(args.objects)
    except SettingsError as e:
        return _fail("openapi", str(e), 2)
    doc = openapi_json(objects, package_version())
    if args.output:
        Path(args.output).write_bytes(doc)
    else:
        sys.stdout.buffer.write(doc)
    return 0


def add_tenant_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = sub.add_parser("create", help="create a tenant in the control database")
    c.add_argument("name", help="the tenant's name, unique in the cluster")
    c.add_argument("--webhook-url", help="where the tenant's events are POSTed")
    add_webhook_secret_arguments(c)
    c.add_argument("--events-days", type=int, default=30, help="how long events are kept")
    c.add_argument("--data", default="./data", help="the cluster's data directory")
    add_postgres_argument(c)
    listing = sub.add_parser("list", help="list tenants")
    listing.add_argument("--data", default="./data",
                         help="the cluster's data directory (default ./data)")
    add_postgres_argument(listing)


def add_identity_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = sub.add_parser("create", help="create an identity and its IdentityMailbox")
    c.add_argument("--tenant", required=True, help="the tenant's id (ten_...) or name")
    c.add_argument("--name", required=True, help="the identity's name, unique in the tenant")
    c.add_argument("--address", action="append", default=[], metavar="ADDRESS",
                   help="an address mail to it arrives at through the SMTP door (repeatable)")
    add_target_arguments(c)


def run_tenant(args: argparse.Namespace) -> int:
    import json

    from mailbox_actors.wire.errors import MailboxActorsError

    async def go() -> Any:
        async with open_control_db(args.data, args.postgres) as db:
            if args.action == "list":
                return [msgspec.to_builtins(t) | {"webhook_secret": None}
                        for t in await db.list_tenants()]
            t = await db.create_tenant(args.name, webhook_url=args.webhook_url,
                                       webhook_secret=secret, events_days=args.events_days)
            return msgspec.to_builtins(t) | {"webhook_secret": None}
    try:
        secret = webhook_secret(args) if args.action == "create" else None
        print(json.dumps(anyio.run(go), indent=2))
    except SecretError as e:
        return _fail("tenant", str(e), 2)
    except MailboxActorsError as e:
        return _fail("tenant", f"{e.code.value}: {e.message}", 1)
    return 0


def run_identity(args: argparse.Namespace) -> int:
    import json

    from mailbox_actors.node.control_ops import create_identity
    from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

    async def go() -> Any:
        async with open_control_db(args.data, args.postgres) as db, _client(args) as client:
            tenant = await db.find_tenant(args.tenant)
            if tenant is None:
                raise MailboxActorsError(ErrorCode.TENANT_NOT_FOUND,
                                         f"no tenant has the id or name {args.tenant!r}")
            from mailbox_actors.platform.control.addresses import addresses_of

            ident = await create_identity(db, client, tenant.id, args.name, args.address)
            return msgspec.to_builtins(ident) | {"addresses": await addresses_of(db, ident.id)}
    try:
        print(json.dumps(anyio.run(go), indent=2))
    except NoCluster as e:
        return _fail("identity", str(e), 1)
    except FileNotFoundError as e:
        return _fail("identity", _no_token(args.data, e), 2)
    except MailboxActorsError as e:
        return _fail("identity", f"{e.code.value}: {e.message}", 1)
    return 0


async def _tenant_id(data: str, given: str | None, postgres: str | None) -> str | None:
    """A tenant named on the command line by id or name (OPS-9): its id when the control database
    on DATA knows it, else the value as given (objects without a control database take any)."""
    if given is None or not has_control_db(data, postgres):
        return given
    async with open_control_db(data, postgres) as db:
        tenant = await db.find_tenant(given)
    return given if tenant is None else tenant.id
