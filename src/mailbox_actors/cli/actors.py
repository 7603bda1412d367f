"""``mailbox-actors actors``: operator inspection from the terminal (UI-1).

``namespaces`` (counts), ``list NAMESPACE`` (a page of actors across the nodes), ``show``,
``rows TABLE``, ``kv`` and ``outbox`` of one actor, each read without activating it, under the
operator token found through ``--data`` (or ``--url``). Tables for people, ``--json`` for
programs; a page that has more prints the ``--cursor`` that continues it. Exit status: 0 ok, 1 an
error answer or no cluster, 2 a usage error.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import anyio

from mailbox_actors.cli.data_dir import add_target_arguments
from mailbox_actors.cli.tables import add_json_argument, print_json, print_table, when

__all__ = ["add_arguments", "limit_arg", "run"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_MAX_PAGES = 10_000  # --all: a bound, never reached by a real namespace at 200 a page


def limit_arg(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer 1..200 (got {text!r})") from None
    if not 1 <= n <= 200:
        raise argparse.ArgumentTypeError(f"must be 1..200 (got {n})")
    return n


def _paging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cursor", help="continue from the cursor a previous page printed")
    p.add_argument("--limit", type=limit_arg, help="items a page (1..200, default 50)")


def _common(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    add_json_argument(p)


def _one(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", help="the actor's namespace, e.g. identity_mailbox")
    p.add_argument("object", metavar="ID_OR_NAME",
                   help="the actor's 64-hex id, or its name (looked up with the cluster token)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    n = sub.add_parser("namespaces", help="each namespace's actors, active actors and alarms")
    _common(n)
    ls = sub.add_parser("list", help="a page of a namespace's actors across the nodes, by id")
    ls.add_argument("namespace", help="e.g. identity_mailbox, tenant_quota, or your own")
    _paging(ls)
    ls.add_argument("--all", action="store_true", help="follow the cursor to the last page")
    _common(ls)
    show = sub.add_parser("show", help="one actor: meta, alarm and purposes, tables, KV, outbox")
    _one(show)
    _common(show)
    rows = sub.add_parser("rows", help="a page of one of the actor's tables, read-only")
    _one(rows)
    rows.add_argument("table", help="the table's name (see 'actors show')")
    _paging(rows)
    rows.add_argument("--content", action="store_true",
                      help="show text and bytes as stored (a node in dev mode on loopback only)")
    _common(rows)
    kv = sub.add_parser("kv", help="a page of the actor's KV, values decoded")
    _one(kv)
    _paging(kv)
    kv.add_argument("--content", action="store_true", help="show text and bytes as stored")
    _common(kv)
    box = sub.add_parser("outbox", help="the actor's outbox, newest first (pending first)")
    _one(box)
    _paging(box)
    _common(box)


def run(args: argparse.Namespace) -> int:
    from mailbox_actors.rpc.client import RpcError
    from mailbox_actors.rpc.inspection_client import InspectionClient

    try:
        client = InspectionClient.from_data_dir(args.data, args.url)
    except FileNotFoundError as e:
        print(f"mailbox-actors actors: no operator token: set MAILBOX_ACTORS_OPERATOR_TOKEN (or "
              f"_OPERATOR_TOKEN_FILE) ({e.filename} does not exist)", file=sys.stderr)
        return 2
    except RpcError as e:
        print(f"mailbox-actors actors: {e.message}", file=sys.stderr)
        return 1

    async def go() -> int:
        async with client:
            return await _action(client, args)
    try:
        return anyio.run(go)
    except RpcError as e:
        print(f"mailbox-actors actors: {e.code.value}: {e.message}", file=sys.stderr)
        return 1


async def resolve_id(args: argparse.Namespace, namespace: str, given: str) -> str:
    """An actor named by id (64 hex) or by name (its id from any node, cluster token)."""
    if _HEX64.fullmatch(given):
        return given
    from mailbox_actors.rpc.client import Client

    kw = {"url": args.url} if args.url else {}
    async with Client.from_data_dir(args.data, **kw) as c:
        return await c.id_from_name(namespace, given)


async def _action(client: Any, args: argparse.Namespace) -> int:
    if args.action == "namespaces":
        view = await client.overview()
        if args.json:
            print_json(view)
        else:
            print_table(["namespace", "actors", "active", "alarms", "overdue"],
                        [[c.namespace, c.actors, c.active, c.alarms_pending, c.alarms_overdue]
                         for c in view.namespaces])
            print(f"\nnodes: {', '.join(view.nodes)}")
        return 0
    if args.action == "list":
        pages = [await client.list_actors(args.namespace, cursor=args.cursor, limit=args.limit)]
        while args.all and pages[-1].next_cursor is not None and len(pages) < _MAX_PAGES:
            pages.append(await client.list_actors(args.namespace, cursor=pages[-1].next_cursor,
                                                  limit=args.limit))
        actors = [a for p in pages for a in p.actors]
        cursor = pages[-1].next_cursor
        if args.json:
            print_json({"namespace": args.namespace, "actors": actors, "next_cursor": cursor})
            return 0
        print_table(["id", "name", "tenant", "node", "bytes", "active", "next alarm", "schema"],
                    [[a.id, a.name, a.tenant, a.node, a.file_bytes, a.active,
                      when(a.next_alarm_ms), a.schema_version] for a in actors])
        _more(cursor)
        return 0
    oid = await resolve_id(args, args.namespace, args.object)
    if args.action == "show":
        d = await client.show_actor(args.namespace, oid)
        if args.json:
            print_json(d)
            return 0
        print_table(["field", "value"], [
            ["namespace", d.namespace], ["id", d.id], ["name", d.name], ["node", d.node],
            ["active", d.active], ["file bytes", d.file_bytes],
            *([k, v] for k, v in d.meta.items()),
            ["alarm", when(d.alarm.at_ms)], ["alarm retries", d.alarm.retries],
            ["KV keys", d.kv_keys], ["outbox pending", d.outbox_pending],
            ["outbox dispatched", d.outbox_dispatched]])
        if d.alarm.purposes:
            print()
            print_table(["purpose", "due", "retries"],
                        [[p.purpose, when(p.due_ms), p.retries] for p in d.alarm.purposes])
        print()
        print_table(["table", "rows", "columns"],
                    [[t.name, f"{t.rows}+" if t.rows_capped else t.rows, ", ".join(t.columns)]
                     for t in d.tables])
        return 0
    if args.action == "rows":
        page = await client.rows(args.namespace, oid, args.table, cursor=args.cursor,
                                 limit=args.limit, content=args.content)
        if args.json:
            print_json(page)
            return 0
        print_table(page.columns, page.rows)
        _more(page.next_cursor)
        return 0
    if args.action == "kv":
        kv = await client.kv(args.namespace, oid, cursor=args.cursor, limit=args.limit,
                             content=args.content)
        if args.json:
            print_json(kv)
            return 0
        print_table(["key", "type", "value"], [[e.key, e.type, e.value] for e in kv.entries])
        _more(kv.next_cursor)
        return 0
    box = await client.outbox(args.namespace, oid, cursor=args.cursor, limit=args.limit)
    if args.json:
        print_json(box)
        return 0
    print_table(["sequence", "event", "type", "occurred", "dispatched"],
                [[e.sequence, e.id, e.type, when(e.occurred_at_ms),
                  when(e.dispatched_at_ms) if e.dispatched_at_ms is not None else "pending"]
                 for e in box.events])
    print(f"\npending: {box.pending}")
    _more(box.next_cursor)
    return 0


def _more(cursor: str | None) -> None:
    if cursor is not None:
        print(f"\nmore: --cursor {cursor}")
