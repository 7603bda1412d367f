"""The receiving side of Post (PO-4): ``admit_post`` in the receiver's own transaction.

A receiver adds ``PostDeliver`` to its request union and ``POST_RECEIVER_SCHEMA`` to its
migrations, and answers the op with ``receive(self.sql, req, ROUTES, apply)``: the envelope is
decoded with the route's Structs, and ``apply`` (the event's mutation) and the admission commit in
one transaction. A key admitted before is answered ``duplicate`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.routes import Route, Routes
from mailbox_actors.wire.post import PostAnswer, PostDeliver, PostEnvelope

__all__ = ["Apply", "admit_post", "receive"]

# (tx, route, address, event, envelope) -> an optional JSON receipt, inside the receiver's
# transaction. Raising rolls the admission back with the mutation; a MailboxActorsError's code
# tells the producer whether to retry (retryable) or keep a dead letter (permanent).
Apply = Callable[[SqlStorage, Route[Any, Any], Any, Any, PostEnvelope], dict[str, Any] | None]

_ENC = msgspec.json.Encoder()
_DICT = msgspec.json.Decoder(dict[str, Any])


def admit_post(tx: SqlStorage, envelope: PostEnvelope,
               receipt: dict[str, Any] | None = None) -> bool:
    """Inside the receiver's transaction: record the key. False when it was admitted before."""
    if not tx.in_transaction:
        raise RuntimeError("admit_post runs inside the receiver's transaction_sync")
    cur = tx.exec("INSERT INTO post_admitted (key, producer, admitted_at_ms, receipt) "
                  "VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING", envelope.key,
                  envelope.producer, tx.now_ms(),
                  None if receipt is None else _ENC.encode(receipt).decode())
    return cur.rows_written > 0


def receive(sql: SqlStorage, req: PostDeliver, routes: Routes, apply: Apply) -> PostAnswer:
    """Decode, apply and admit ``req``'s envelope in one transaction."""
    env = req.envelope
    route = routes.get(env.route)
    if route is None:
        return PostAnswer(status="refused", reason="unknown_route")
    event_type = route.prepare.event if route.prepare is not None else route.event
    try:
        address = msgspec.convert(env.address, route.address)
        event = msgspec.convert(env.event, event_type)
    except msgspec.ValidationError:
        return PostAnswer(status="refused", reason="event_does_not_match_route")

    def run(tx: SqlStorage) -> PostAnswer:
        prior = tx.exec("SELECT receipt FROM post_admitted WHERE key = ?", env.key).all()
        if prior:
            return PostAnswer(status="duplicate",
                              receipt=_DICT.decode(prior[0][0]) if prior[0][0] else None)
        receipt = apply(tx, route, address, event, env)
        admit_post(tx, env, receipt)
        return PostAnswer(status="delivered", receipt=receipt)

    return sql.transaction_sync(run)
