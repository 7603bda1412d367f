"""``mailbox-actors messages``: the mail an identity received, for people (UI-2).

``list`` (newest first, or one ``--thread``), ``show`` (headers, text, attachments), ``raw`` (the
source as received) and ``attachment`` (one part's content) to standard output or ``-o FILE``,
``thread``, ``search`` (full text, IN-10) and ``wait`` (until a matching message arrives, IN-4).
The identity is named by id or by name with its tenant (the control database in DATA resolves
names); calls carry the identity as their owner, with the cluster token. Exit status: 0 ok, 1 an
``err`` answer, no such message or nothing arrived in time, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio

from mailbox_actors.cli.data_dir import add_target_arguments
from mailbox_actors.cli.tables import print_table, when

__all__ = ["add_arguments", "run"]

_POLL_S = 0.2


def _limit(top: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer 1..{top}") from None
        if not 1 <= n <= top:
            raise argparse.ArgumentTypeError(f"must be 1..{top} (got {n})")
        return n
    return parse


def _timeout(text: str) -> float:
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of seconds") from None
    if not 0 < n <= 86_400:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400 (got {text})")
    return n


def _owner(p: argparse.ArgumentParser) -> None:
    p.add_argument("--identity", required=True,
                   help="the identity's id (idn_...), or its name with --tenant")
    p.add_argument("--tenant", help="the tenant (id or name) when --identity is a name")
    add_target_arguments(p)


def _json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = sub.add_parser("list", help="received messages, newest first")
    ls.add_argument("--thread", help="only this thread's messages")
    ls.add_argument("--limit", type=_limit(200), default=50, help="messages a page (1..200)")
    ls.add_argument("--cursor", help="continue from the cursor a previous page printed")
    _owner(ls)
    _json(ls)
    show = sub.add_parser("show", help="one message: headers, text, attachments, defects")
    show.add_argument("message_id", metavar="MESSAGE_ID", help="the message's id (imsg_...)")
    show.add_argument("--html", action="store_true", help="print the HTML body, not the text")
    _owner(show)
    _json(show)
    raw = sub.add_parser("raw", help="the message's source as received (RFC 5322 bytes)")
    raw.add_argument("message_id", metavar="MESSAGE_ID", help="the message's id (imsg_...)")
    raw.add_argument("-o", "--output", help="write to this file instead of standard output")
    _owner(raw)
    att = sub.add_parser("attachment", help="one attachment's content")
    att.add_argument("message_id", metavar="MESSAGE_ID", help="the message's id (imsg_...)")
    att.add_argument("part", type=int, metavar="PART",
                     help="the attachment's index in 'messages show' (0, 1, ...)")
    att.add_argument("-o", "--output", help="write to this file instead of standard output")
    _owner(att)
    th = sub.add_parser("thread", help="a thread's messages, oldest first")
    th.add_argument("thread_id", metavar="THREAD_ID", help="the thread's id (thr_...)")
    _owner(th)
    _json(th)
    se = sub.add_parser("search", help="full-text search: subject, text, attachment text")
    se.add_argument("query", metavar="QUERY",
                    help='an FTS5 query: words, "a phrase", OR, NOT, prefix*, subject:word')
    se.add_argument("--from", dest="from_", help="only from this address")
    se.add_argument("--to", help="only to this address (to, cc or delivered-to)")
    se.add_argument("--thread", help="only in this thread")
    se.add_argument("--has-attachment", dest="has_attachment", action="store_const", const=True,
                    help="only messages with attachments")
    se.add_argument("--limit", type=_limit(100), default=20, help="messages a page (1..100)")
    se.add_argument("--cursor", help="continue from the cursor a previous page printed")
    _owner(se)
    _json(se)
    wt = sub.add_parser("wait", help="wait until a matching message arrives; print its id")
    wt.add_argument("--from", dest="from_", help="from this address")
    wt.add_argument("--to", help="to this address")
    wt.add_argument("--subject", help="the subject contains this (any case)")
    wt.add_argument("--header", metavar="NAME:VALUE", help="a header with exactly this value")
    wt.add_argument("--after-ms", dest="after_ms", type=int,
                    help="received at or after this Unix ms time (default: when the command "
                         "started; 0: any message already there too)")
    wt.add_argument("--timeout-s", dest="timeout_s", type=_timeout, default=60.0,
                    help="give up after this many seconds (default 60)")
    _owner(wt)
    _json(wt)


def run(args: argparse.Namespace) -> int:
    from mailbox_actors.cli.mail import resolve_owner
    from mailbox_actors.rpc.client import Client, RpcError
    from mailbox_actors.wire.errors import MailboxActorsError

    async def go() -> int:
        tenant, identity, mailbox = await resolve_owner(args.data, args.tenant, args.identity,
                                                        args.postgres)
        kw = {"url": args.url} if args.url else {}
        async with Client.from_data_dir(args.data, **kw) as c:
            async def call(req: dict[str, Any]) -> Any:
                return await c.call("identity_mailbox", mailbox, req, tenant_id=tenant,
                                    identity_id=identity)
            return await _action(call, args)
    try:
        return anyio.run(go)
    except FileNotFoundError as e:
        print(f"mailbox-actors messages: not found: {e.filename or e}; start the cluster first "
              "or pass --data", file=sys.stderr)
        return 2
    except (RpcError, MailboxActorsError) as e:
        print(f"mailbox-actors messages: {e.code.value}: {e.message}", file=sys.stderr)
        return 1


def _missing(what: str) -> int:
    print(f"mailbox-actors messages: no such {what} in this mailbox", file=sys.stderr)
    return 1


async def _action(call: Any, args: argparse.Namespace) -> int:
    a = args.action
    if a == "list":
        page = await call({"op": "list_messages", "limit": args.limit, "cursor": args.cursor,
                           "thread_id": args.thread})
        _summaries(page, args.json)
        return 0
    if a == "show":
        msg = await call({"op": "get_message", "message_id": args.message_id})
        if msg is None:
            return _missing("message")
        if args.json:
            print(json.dumps(msg, indent=2))
            return 0
        print_table(["field", "value"], [
            ["message", msg["message_id"]], ["thread", msg["thread_id"]], ["from", msg["from"]],
            ["to", ", ".join(msg["to"])], ["cc", ", ".join(msg["cc"])],
            ["subject", msg["subject"]], ["date", when(msg["date_ms"])],
            ["received", when(msg["received_at_ms"])],
            ["defects", ", ".join(msg["defects"]) or "-"]])
        for i, part in enumerate(msg["attachments"]):
            print(f"attachment {i}: {part['filename'] or '-'} ({part['content_type']}, "
                  f"{part['size']} B)")
        print()
        print((msg["html"] if args.html else msg["text"]) or "(no "
              f"{'HTML' if args.html else 'text'} body)")
        return 0
    if a in ("raw", "attachment"):
        return await _download(call, args)
    if a == "thread":
        th = await call({"op": "get_thread", "thread_id": args.thread_id})
        if th is None:
            return _missing("thread")
        page = await call({"op": "list_messages", "thread_id": th["thread_id"], "limit": 200})
        page["messages"] = list(reversed(page["messages"]))
        if args.json:
            print(json.dumps({"thread_id": th["thread_id"], "message_ids": th["message_ids"],
                              "messages": page["messages"]}, indent=2))
            return 0
        print(f"thread {th['thread_id']}: {len(th['message_ids'])} messages\n")
        _summaries(page, False)
        return 0
    if a == "search":
        filters = {k: v for k, v in (("from", args.from_), ("to", args.to),
                                     ("thread_id", args.thread),
                                     ("has_attachment", args.has_attachment)) if v is not None}
        page = await call({"op": "search_messages", "query": args.query, "limit": args.limit,
                           "cursor": args.cursor, "filters": filters or None})
        _summaries(page, args.json)
        return 0
    return await _wait(call, args)


def _summaries(page: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(page, indent=2))
        return
    print_table(["message", "thread", "from", "subject", "received", "bytes"],
                [[m["message_id"], m["thread_id"], m["from"], m["subject"],
                  when(m["received_at_ms"]), m["size_bytes"]] for m in page["messages"]])
    if page.get("next_cursor"):
        print(f"\nmore: --cursor {page['next_cursor']}")


async def _download(call: Any, args: argparse.Namespace) -> int:
    import base64

    req: dict[str, Any] = {"op": "get_raw_message", "message_id": args.message_id}
    if args.action == "attachment":
        req = {"op": "get_attachment", "message_id": args.message_id, "part": args.part}
    # A command line, one file: the loop has nothing else to run while it opens.
    out = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: ASYNC230
    try:
        chunk, chunks = 0, 1
        while chunk < chunks:
            got = await call({**req, "chunk": chunk})
            if got is None:
                return _missing("message")
            if args.action == "raw" and not got["kept"]:
                print("mailbox-actors messages: this message was received before raw sources "
                      "were kept", file=sys.stderr)
                return 1
            out.write(base64.b64decode(got["data"]))
            chunk, chunks = chunk + 1, got["chunks"]
        out.flush()
    finally:
        if args.output:
            out.close()
    return 0


async def _wait(call: Any, args: argparse.Namespace) -> int:
    after = int(time.time() * 1000) if args.after_ms is None else args.after_ms
    flt: dict[str, Any] = {k: v for k, v in (("from", args.from_), ("to", args.to),
                                             ("subject_contains", args.subject)) if v}
    flt["received_after_ms"] = after  # what arrived since, even before the wait was stored
    if args.header:
        name, sep, value = args.header.partition(":")
        if not sep or not name.strip():
            print("mailbox-actors messages: --header must be NAME:VALUE", file=sys.stderr)
            return 2
        flt["header"] = {"name": name.strip(), "value": value.strip()}
    expires = int(time.time() * 1000 + args.timeout_s * 1000)
    wait = await call({"op": "register_wait", "filter": flt, "expires_at_ms": expires})
    deadline = time.monotonic() + args.timeout_s
    while True:
        got = await call({"op": "wait_poll", "wait_id": wait["wait_id"]})
        if got["status"] == "matched":
            if args.json:
                print(json.dumps(got))
            else:
                print(f"{got['message_id']} {got['thread_id']}")
            return 0
        if got["status"] == "expired" or time.monotonic() >= deadline:
            print(f"mailbox-actors messages: no matching message arrived within "
                  f"{args.timeout_s:g} s", file=sys.stderr)
            return 1
        await anyio.sleep(_POLL_S)
