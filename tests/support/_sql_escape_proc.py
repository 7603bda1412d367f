"""Run by test_regressions_review: actor SQL reaching fts3_tokenizer's pointer API, in a process of
its own (if the authorizer lets it through, the process crashes with SIGSEGV)."""

from __future__ import annotations

import sys

import anyio

import actors_for_tests as afs
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError


async def main(data: str) -> None:
    async with TestRuntime(data, objects=afs.ALL_OBJECTS) as rt:
        oid = await afs.new_scratch(rt, "a")

        async def evil(actor: afs.Scratch, call: object, arg: object) -> None:
            actor.sql.exec("SELECT fts3_tokenizer('simple', X'4141414141414141')").all()
            actor.sql.exec("CREATE VIRTUAL TABLE f USING fts3(tokenize=simple)")
            actor.sql.exec("INSERT INTO f VALUES ('boom')")

        try:
            await afs.run(rt, oid, evil)
        except MailboxActorsError as e:
            print("refused:", e.code.value, flush=True)
            return
        print("ran", flush=True)


anyio.run(main, sys.argv[1])
