"""``mailbox-actors domain add|check|status`` (DM-5): sending domains from the command line.

``add`` registers the domain in the control database with a new DomainMonitor and sends init
(whose first check runs at once); ``check`` runs every check now and prints the verdicts;
``status`` prints the state, each record's last result and the last runs. Exit status: 0 ok, 1 the
operation failed, 2 a usage error (no cluster in DATA, a domain never added).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

import anyio
import msgspec

from mailbox_actors.cli.data_dir import add_target_arguments, open_control_db
from mailbox_actors.core.dns.names import NameRefused, normalise_domain
from mailbox_actors.rpc.client import Client, RpcError
from mailbox_actors.wire.errors import MailboxActorsError

__all__ = ["add_arguments", "render_status", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = sub.add_parser("add", help="register a domain and start checking its DNS records")
    a.add_argument("name", help="the domain (a U-label is converted to its A-label)")
    a.add_argument("--tenant", required=True, help="the tenant's id (ten_...) or name")
    a.add_argument("--spf-include", help="the include the SPF record must have, e.g. "
                   "_spf.provider.example")
    a.add_argument("--dkim-selector", help="the DKIM selector to check (s1 checks "
                   "s1._domainkey.NAME)")
    a.add_argument("--dkim-key", help="the expected DKIM public key (the p= value)")
    a.add_argument("--mx", action="append", default=[], metavar="HOST",
                   help="a host the MX records must name (repeatable)")
    for action, text in (("check", "run every check now and print the verdicts"),
                         ("status", "print the state and each record's last result")):
        c = sub.add_parser(action, help=text)
        c.add_argument("name", help="the domain")
        if action == "status":
            c.add_argument("--json", action="store_true", help="print the status as JSON")
    for c in sub.choices.values():
        add_target_arguments(c)


def _fail(text: str, status: int) -> int:
    print(f"mailbox-actors domain: {text}", file=sys.stderr)
    return status


def _when(ms: int | None) -> str:
    if ms is None:
        return "none"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_status(st: dict[str, Any]) -> str:
    lines = [f"{st['domain']}  {st['state']}  ({st['consecutive_failures']} failed check(s) in a "
             f"row; next check {_when(st['next_check_ms'])})"]
    for r in st["results"]:
        lines.append(f"  {r['record']:6} {r['verdict']:8} {r['code']:28} {r['message']}")
    if st["last_checks"]:
        lines.append("last checks: " + ", ".join(
            f"{_when(c['at_ms'])} {c['verdict']}" for c in st["last_checks"][:5]))
    return "\n".join(lines)


async def _go(args: argparse.Namespace) -> Any:
    from mailbox_actors.node.control_ops import create_domain
    from mailbox_actors.wire.domain import ExpectedRecords

    kw = {"url": args.url} if args.url else {}
    # the client first: it reads the token, so a DATA without a cluster creates nothing
    async with Client.from_data_dir(args.data, **kw) as client, \
            open_control_db(args.data, args.postgres) as db:
        if args.action == "add":
            expected = ExpectedRecords(spf_include=args.spf_include,
                                       dkim_selector=args.dkim_selector, dkim_key=args.dkim_key,
                                       mx_hosts=list(args.mx))
            tenant = await db.find_tenant(args.tenant)  # by id or name (OPS-9)
            return msgspec.to_builtins(await create_domain(
                db, client, args.tenant if tenant is None else tenant.id, args.name, expected))
        domain = await db.get_domain_by_name(normalise_domain(args.name))
        if domain is None:
            raise LookupError(args.name)
        return await client.call("domain_monitor", domain.monitor_id, {"op": args.action},
                                 tenant_id=domain.tenant_id)


def run(args: argparse.Namespace) -> int:
    try:
        result = anyio.run(_go, args)
    except FileNotFoundError as e:
        return _fail(f"no cluster in {args.data} ({e.filename}); start it first or pass --data", 2)
    except NameRefused as e:
        return _fail(f"invalid_request: {e}", 1)
    except LookupError:
        return _fail(f"no domain {args.name!r} in the control database; add it first", 2)
    except msgspec.ValidationError as e:
        return _fail(f"invalid_request: {e}", 1)
    except (RpcError, MailboxActorsError) as e:
        return _fail(f"{e.code.value}: {e.message}", 1)
    if args.action == "status" and not args.json:
        print(render_status(result))
    else:
        print(json.dumps(result, indent=2))
    return 0
