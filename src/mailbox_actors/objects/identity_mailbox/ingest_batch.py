"""Several ingests for one IdentityMailbox in one transaction (IN-1, IN-5): the SMTP door's group
commit.

The SMTP door hands a mailbox, in one in-process call, the messages for it whose DATA ended in
the same turn of the event loop (``node/smtp_door.py``). Each message is what ``ingest`` makes
of it alone, in the order given: its cap, its parse, its replay or conflict, its rows, its thread
(a later message sees an earlier one's), its waits and its ``message.received`` event. Only the
commit is shared, so the messages pay one BEGIN and COMMIT, write the pages they append to once,
and their events share an outbox run. The door answers each message only once that commit is
done (IN-5).

Each message's own refusal (over the cap, a replay with other bytes) is its answer alone: a
conflict is raised before that message writes anything, so the others' writes stand. Anything
else that fails (a storage limit met part-way through a message's writes, too) fails the call as
a whole (the transaction rolls back), and the door then
ingests each message alone, so every answer is what it would have been without the batch.

``IngestBatch`` is not in the RPC's request union: the op is reached in-process only.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import msgspec

from mailbox_actors.core.inbound.parse import ParsedMessage, parse_message
from mailbox_actors.objects.identity_mailbox import inbound
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError
from mailbox_actors.wire.inbound import Ingest, IngestReply

if TYPE_CHECKING:
    from mailbox_actors.objects.identity_mailbox.inbox import Inbox

__all__ = ["BATCH_ITEM_MAX_BYTES", "BATCH_MAX_ITEMS", "IngestBatch", "ingest_batch"]

BATCH_MAX_ITEMS = 8  # a batch's handler step stays short (the loop serves others meanwhile)
# A larger message is parsed in a worker thread (``inbound.ingest``): it goes alone.
BATCH_ITEM_MAX_BYTES = inbound.THREAD_PARSE


class IngestBatch(msgspec.Struct, tag="ingest_batch", tag_field="op", forbid_unknown_fields=True):
    """Ingests for one mailbox, committed together; each answered as it would be alone."""

    items: list[Ingest]


async def ingest_batch(mb: Inbox, req: IngestBatch
                       ) -> list[IngestReply | MailboxActorsError]:
    """Per message, in order: its reply, or the error ``ingest`` would have raised for it."""
    lim = inbound.limits(mb)
    out: list[IngestReply | MailboxActorsError | None] = [None] * len(req.items)
    ready: list[tuple[int, Ingest, str, ParsedMessage]] = []
    for i, item in enumerate(req.items):
        try:
            inbound.check_size(lim, item.raw)
        except MailboxActorsError as e:
            out[i] = e
            continue
        if len(item.raw) > BATCH_ITEM_MAX_BYTES:  # the door sends none; served as ingest serves it
            out[i] = await _alone(mb, item)
            continue
        ready.append((i, item, hashlib.sha256(item.raw).hexdigest(), parse_message(item.raw, lim)))

    def run(tx: SqlStorage) -> None:
        for i, item, digest, parsed in ready:
            try:
                out[i] = inbound.store(mb, tx, item.source_id, digest, len(item.raw), parsed,
                                       item.raw)
            except MailboxActorsError as e:
                # Only a conflict is raised before this message wrote anything. Any other refusal
                # (a storage limit, a failed write) may follow some of its writes: it fails the
                # whole call, which rolls back, and the door then ingests each message alone.
                if e.code is not ErrorCode.CONFLICT:
                    raise
                out[i] = e

    if ready:
        mb.sql.transaction_sync(run)
    answers = [r for r in out if r is not None]
    assert len(answers) == len(out), "every message has its answer"
    return answers


async def _alone(mb: Inbox, item: Ingest) -> IngestReply | MailboxActorsError:
    try:
        return await inbound.ingest(mb, item)
    except MailboxActorsError as e:
        return e
