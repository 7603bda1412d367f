"""``mailbox-actors queues`` and ``mailbox-actors events`` (UI-3), under the operator token.

``queues dead-letters QUEUE`` pages the letters given up on, with why and after how many attempts;
``queues redrive QUEUE`` sends the named ones (``--id``, repeatable) or the oldest ``--limit`` back
to their queue. ``events tail --tenant T`` prints a tenant's indexed events from the start (or a
``--cursor``) and follows the index live until interrupted (``--no-follow``: until caught up;
``--count N``: after N events). Exit status: 0 ok, 1 an error answer or no cluster, 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio

from mailbox_actors.cli.actors import limit_arg
from mailbox_actors.cli.data_dir import add_target_arguments
from mailbox_actors.cli.tables import add_json_argument, print_json, print_table, when

__all__ = ["add_events_arguments", "add_queues_arguments", "run_events", "run_queues"]

_MAX_REDRIVE = 1000


def _redrive_limit(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer 1..{_MAX_REDRIVE}") from None
    if not 1 <= n <= _MAX_REDRIVE:
        raise argparse.ArgumentTypeError(f"must be 1..{_MAX_REDRIVE} (got {n})")
    return n


def _poll_ms(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer 50..60000") from None
    if not 50 <= n <= 60_000:
        raise argparse.ArgumentTypeError(f"must be 50..60000 (got {n})")
    return n


def add_queues_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    dl = sub.add_parser("dead-letters", help="a page of a queue's dead letters: reason, attempts")
    dl.add_argument("queue", nargs="?", default="webhooks", help="the queue (default webhooks)")
    dl.add_argument("--cursor", help="continue from the cursor a previous page printed")
    dl.add_argument("--limit", type=limit_arg, help="letters a page (1..200, default 50)")
    add_target_arguments(dl)
    add_json_argument(dl)
    rd = sub.add_parser("redrive", help="send dead letters back to their queue to be tried again")
    rd.add_argument("queue", nargs="?", default="webhooks", help="the queue (default webhooks)")
    rd.add_argument("--id", dest="ids", action="append", metavar="MESSAGE_ID",
                    help="a dead letter's message id (repeatable); none: the oldest --limit")
    rd.add_argument("--limit", type=_redrive_limit, default=100,
                    help=f"without --id, how many of the oldest (1..{_MAX_REDRIVE}, default 100)")
    add_target_arguments(rd)
    add_json_argument(rd)


def add_events_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    t = sub.add_parser("tail", help="print a tenant's events as they are indexed (Ctrl-C ends)")
    t.add_argument("--tenant", required=True, help="the tenant's id (ten_...) or name")
    t.add_argument("--cursor", help="start after this cursor (default: the first event)")
    t.add_argument("--no-follow", dest="follow", action="store_false",
                   help="stop once every indexed event is printed")
    t.add_argument("--count", type=int, help="stop after this many events")
    t.add_argument("--poll-ms", dest="poll_ms", type=_poll_ms, default=1000,
                   help="how often to ask for new events when caught up (default 1000)")
    add_target_arguments(t)
    t.add_argument("--json", action="store_true", help="one JSON object a line (JSON Lines)")


def _client(args: argparse.Namespace, cmd: str) -> Any:
    from mailbox_actors.rpc.client import RpcError
    from mailbox_actors.rpc.inspection_client import InspectionClient

    try:
        return InspectionClient.from_data_dir(args.data, args.url)
    except FileNotFoundError as e:
        print(f"mailbox-actors {cmd}: no operator token: set MAILBOX_ACTORS_OPERATOR_TOKEN (or "
              f"_OPERATOR_TOKEN_FILE) ({e.filename} does not exist)", file=sys.stderr)
        raise SystemExit(2) from None
    except RpcError as e:
        print(f"mailbox-actors {cmd}: {e.message}", file=sys.stderr)
        raise SystemExit(1) from None


def _run(cmd: str, args: argparse.Namespace, action: Any) -> int:
    from mailbox_actors.rpc.client import RpcError

    try:
        client = _client(args, cmd)
    except SystemExit as e:
        return int(e.code or 0)

    async def go() -> int:
        async with client:
            return int(await action(client, args))
    try:
        return anyio.run(go)
    except RpcError as e:
        print(f"mailbox-actors {cmd}: {e.code.value}: {e.message}", file=sys.stderr)
        return 1


def run_queues(args: argparse.Namespace) -> int:
    return _run("queues", args, _queues)


def run_events(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 1:
        print("mailbox-actors events: --count must be at least 1", file=sys.stderr)
        return 2
    return _run("events", args, _tail)


async def _queues(client: Any, args: argparse.Namespace) -> int:
    if args.action == "dead-letters":
        page = await client.dead_letters(args.queue, cursor=args.cursor, limit=args.limit)
        if args.json:
            print_json(page)
            return 0
        print_table(["message", "kind", "attempts", "reason", "recorded", "event"],
                    [[d.message_id, d.kind, d.attempts, d.reason, when(d.recorded_at_ms),
                      (d.body.get("event") or {}).get("type") if isinstance(
                          d.body.get("event"), dict) else None] for d in page.dead_letters])
        if page.next_cursor is not None:
            print(f"\nmore: --cursor {page.next_cursor}")
        return 0
    reply = await client.redrive(args.queue, args.ids, limit=args.limit)
    if args.json:
        print_json(reply)
    else:
        for r in reply.redriven:
            print(f"{r.message_id} -> {r.new_message_id}")
        print(f"redriven: {len(reply.redriven)} to {reply.queue}")
    return 0


async def _tail(client: Any, args: argparse.Namespace) -> int:
    import json

    import msgspec

    cursor, printed = args.cursor, 0
    while True:
        page = await client.events(args.tenant, cursor=cursor, limit=200)
        for e in page.events:
            if args.json:
                print(json.dumps(msgspec.to_builtins(e)))
            else:
                print(f"{when(e.occurred_at_ms)}  {e.type:28} {e.event_id}  {e.namespace}/"
                      f"{e.object_id[:16]}  #{e.sequence}")
            printed += 1
            if args.count is not None and printed >= args.count:
                sys.stdout.flush()
                return 0
        sys.stdout.flush()
        cursor = page.next_cursor or cursor
        if len(page.events) < 200:  # caught up
            if not args.follow:
                return 0
            await anyio.sleep(args.poll_ms / 1000)
