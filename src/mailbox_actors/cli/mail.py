"""Carrier on the command line: ``send`` submits an Email and prints its receipt (``--wait``
follows it to a final status); ``deliveries`` pages through an identity's delivery records with
the operator token (CA-10), or with ``--namespace`` those of any other Carrier user (a Notifier,
a user's own actor).

Tenants and identities are named by id or by name (the control database in DATA resolves names);
an identity can also be given as its IdentityMailbox's 64-hex object id. Exit status: 0 ok, 1 an
``err`` result or an unreachable node, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio

from mailbox_actors.cli.data_dir import add_target_arguments, has_control_db, open_control_db
from mailbox_actors.http.client import HttpPool
from mailbox_actors.rpc.client import Client, RpcError, read_token
from mailbox_actors.wire.carrier import GetEmail, Submit
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["add_deliveries_arguments", "add_send_arguments", "resolve_owner", "run_deliveries",
           "run_send"]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
# Where --wait stops: no automatic step follows these (queued with no transport waits forever;
# --wait-s bounds it).
_FINAL = frozenset({"provider_accepted", "outcome_unknown", "rejected", "refused", "expired",
                    "superseded"})


def add_send_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", required=True, help="the tenant's id (ten_...) or name")
    p.add_argument("--identity", required=True,
                   help="the identity's id (idn_...) or name, or its mailbox's 64-hex id")
    p.add_argument("--from", dest="from_", required=True, help="the sender's address")
    p.add_argument("--to", action="append", default=[], help="a recipient (repeatable)")
    p.add_argument("--cc", action="append", default=[], help="a Cc recipient (repeatable)")
    p.add_argument("--bcc", action="append", default=[], help="a Bcc recipient (repeatable)")
    p.add_argument("--subject", default="", help="one line")
    p.add_argument("--text", help="the plain-text body")
    p.add_argument("--html", help="the HTML body")
    p.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                   help="an extra header, e.g. 'X-Campaign: spring' (repeatable)")
    p.add_argument("--send-before", dest="send_before", type=int,
                   help="Unix ms after which the email must not be sent (it ends expired)")
    p.add_argument("--source-id", dest="source_id",
                   help="your stable id for this email: repeat it to replay safely "
                        "(default: a new random one, so a repeat sends again)")
    p.add_argument("--wait", action="store_true",
                   help="follow the receipt until a final status and print each change")
    p.add_argument("--wait-s", dest="wait_s", type=float, default=60.0,
                   help="give up waiting after this many seconds (default 60)")
    add_target_arguments(p)


def add_deliveries_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("identity", metavar="IDENTITY",
                   help="the identity's id (idn_...), or its mailbox's 64-hex id; with "
                        "--namespace, that actor's 64-hex id or its name")
    p.add_argument("--tenant", help="the tenant (id or name) when IDENTITY is a name")
    p.add_argument("--namespace", default="identity_mailbox",
                   help="another Carrier user's namespace, e.g. notifier (its name is the "
                        "tenant's id) or your own actor's (default identity_mailbox)")
    p.add_argument("--after", help="continue after this cursor (a page's next_cursor)")
    p.add_argument("--limit", type=int, default=32, help="records per page, 1..64 (default 32)")
    p.add_argument("--all", action="store_true", help="follow next_cursor to the last page")
    add_target_arguments(p)


def _fail(cmd: str, text: str, status: int) -> int:
    print(f"mailbox-actors {cmd}: {text}", file=sys.stderr)
    return status


async def resolve_owner(data: str, tenant: str | None, identity: str, postgres: str | None
                        ) -> tuple[str, str, str]:
    """(tenant id, identity id, mailbox id) from ids or names, through the control database."""
    if not has_control_db(data, postgres):
        raise FileNotFoundError(str(Path(data) / "control.sqlite"))
    async with open_control_db(data, postgres) as db:
        record = await db.get_identity(identity)
        if record is None and tenant is not None:
            found = await db.find_tenant(tenant)  # by id or name (OPS-9)
            record = await db.get_identity_by_name(tenant if found is None else found.id,
                                                   identity)
        if record is None:
            raise MailboxActorsError(ErrorCode.IDENTITY_NOT_FOUND,
                                     "no such identity in the control database")
        return record.tenant_id, record.id, record.mailbox_id


def _headers(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep:
            raise ValueError(f"--header must be NAME:VALUE (got {item!r})")
        out[name.strip()] = value.strip()
    return out


def run_send(args: argparse.Namespace) -> int:
    try:
        headers = _headers(args.header)
    except ValueError as e:
        return _fail("send", str(e), 2)
    source_id = args.source_id or f"cli-{uuid.uuid4().hex}"

    async def go() -> int:
        tenant, identity, mid = await resolve_owner(args.data, args.tenant, args.identity,
                                                     args.postgres)
        req = Submit(source_id=source_id, from_=args.from_, to=args.to, cc=args.cc, bcc=args.bcc,
                     subject=args.subject, text=args.text, html=args.html, headers=headers,
                     send_before=args.send_before)
        kw = {"url": args.url} if args.url else {}
        async with Client.from_data_dir(args.data, **kw) as c:
            r = await c.call("identity_mailbox", mid, req, tenant_id=tenant,
                             identity_id=identity)
            print(json.dumps(r), flush=True)
            if not args.wait:
                return 0
            last, deadline = r, time.monotonic() + args.wait_s
            while last["status"] not in _FINAL and time.monotonic() < deadline:
                await anyio.sleep(0.1)
                now = await c.call("identity_mailbox", mid, GetEmail(source_id=source_id),
                                   tenant_id=tenant, identity_id=identity)
                if now != last:
                    print(json.dumps(now), flush=True)
                    last = now
            if last["status"] not in _FINAL:
                print(f"mailbox-actors send: still {last['status']} after {args.wait_s:g} s "
                      "(is a transport configured?)", file=sys.stderr)
                return 1
            return 0
    try:
        return anyio.run(go)
    except FileNotFoundError as e:
        return _fail("send", f"not found: {e.filename or e}; start the cluster first or pass "
                     "--data", 2)
    except RpcError as e:
        print(json.dumps({"err": {"code": e.code.value, "message": e.message,
                                  "details": e.details}}))
        return 1
    except MailboxActorsError as e:
        return _fail("send", f"{e.code.value}: {e.message}", 1)


def run_deliveries(args: argparse.Namespace) -> int:
    data = Path(args.data)

    async def go() -> int:
        ns = args.namespace
        if _HEX64.match(args.identity):
            mid = args.identity
        elif ns == "identity_mailbox":
            _t, _i, mid = await resolve_owner(args.data, args.tenant, args.identity,
                                                     args.postgres)
        else:
            mid = ""  # the actor's name: any node answers its id
        operator = read_token(data, "operator")  # MAILBOX_ACTORS_OPERATOR_TOKEN first (CL-4)
        kw = {"url": args.url} if args.url else {}
        async with Client.from_data_dir(args.data, **kw) as c, HttpPool() as pool:
            mid = mid or await c.id_from_name(ns, args.identity)
            url, after = c.owner_url(ns, mid), args.after
            while True:
                query = f"?limit={args.limit}" + (f"&after={after}" if after else "")
                status, body = await pool.request(
                    url, "GET", f"/admin/deliveries/{quote(ns, safe='')}/{mid}{query}",
                    {"authorization": f"Bearer {operator}"}, b"", timeout_s=10.0)
                page: dict[str, Any] = json.loads(body)
                print(json.dumps(page), flush=True)
                if status != 200:
                    return 1
                after = page.get("next_cursor")
                if not (args.all and after):
                    return 0
    try:
        return anyio.run(go)
    except FileNotFoundError as e:
        return _fail("deliveries", f"not found: {e.filename or e}; start the cluster first or "
                     "pass --data", 2)
    except (OSError, ConnectionError, TimeoutError) as e:
        return _fail("deliveries", f"the node cannot be reached ({type(e).__name__})", 1)
    except MailboxActorsError as e:
        return _fail("deliveries", f"{e.code.value}: {e.message}", 1)
