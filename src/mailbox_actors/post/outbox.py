"""The string-backed outbox (PO-10, the seed's ``makePostOutbox``): Post's order, attempts,
receipts, retry and dead letters for string payloads delivered to a named receiver callable (an
HTTP endpoint, an agent), not only to actors.

An actor makes one ``PostOutbox`` per activation with its receivers by name, adds
``POST_MIGRATIONS`` to its migrations and maps a purpose to a method that awaits
``self.outbox.run()``::

    self.outbox = PostOutbox(self, {"agent_reply": deliver_reply}, purpose="outbox")
    # inside the actor's own transaction, with its change:
    self.outbox.send(tx, "agent_reply", conversation_id, text, key=f"reply:{message_id}")

``send`` stages the letter in the producer's transaction (a replay with the same payload keeps
it; another payload under the key is ``conflict``). Letters to one receiver and address go in
send order: a pending one holds the later ones. Each receiver invocation is recorded before the
call (``attempts``) and has ``attempt_deadline_ms``; the callable answers ``None`` (delivered),
or a dict like a Post receiver's answer: ``{"status": "delivered"|"duplicate"|"refused"|
"failed", "receipt": {...}, "reason": str}``. Raising ``MailboxActorsError`` is judged by its
code (retryable: retried; permanent: a dead letter); any other exception is a failed attempt,
retried with backoff. A crash or a lost answer retries the same key, so a receiver that must act
once deduplicates by ``letter.key``. The rows are Post's own (``post_envelopes``, ``post_jobs``),
beside any actor Post of the same producer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

import msgspec

from mailbox_actors.core.post.rules import ATTEMPT_DEADLINE_MS, RetryAction, RetryPolicy
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.actor_post import OnDelivered, Post
from mailbox_actors.post.executor import Claimed
from mailbox_actors.post.routes import Route, Routes
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.wire.errors import InvalidRequest
from mailbox_actors.wire.post import DeadLetterPage, PostEnvelope, PostRecord

__all__ = ["MAX_PAYLOAD_CHARS", "OutboxLetter", "PostOutbox", "Receiver"]

MAX_PAYLOAD_CHARS = 512 * 1024  # a payload rides one row, well under the 2 MB value limit


class _Address(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    address: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class _Payload(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    payload: Annotated[str, msgspec.Meta(max_length=MAX_PAYLOAD_CHARS)]


class OutboxLetter(msgspec.Struct, frozen=True):
    """What a receiver callable is handed for one attempt."""

    key: str           # the producer's stable key: deduplicate on it
    receiver: str
    address: str
    payload: str
    attempt: int       # receiver invocations of this letter, this one included
    seq: int           # the producer's order
    deadline_ms: int   # the attempt's deadline (the producer's clock)


# One attempt: None (delivered) or a Post answer; raising is a failed or refused attempt.
Receiver = Callable[[OutboxLetter], Awaitable[Mapping[str, Any] | None]]

_KIND = "outbox:"


class PostOutbox:
    """Post's machinery for string payloads to named callables, on the producer's own file."""

    def __init__(self, actor: Actor, receivers: Mapping[str, Receiver], *,
                 purpose: str = "outbox", policy: RetryPolicy | None = None,
                 on_delivered: OnDelivered | None = None,
                 attempt_deadline_ms: int = ATTEMPT_DEADLINE_MS) -> None:
        if not receivers:
            raise ValueError("a PostOutbox needs at least one receiver")
        self.receivers = dict(receivers)
        # One route per receiver, each its own namespace-like label: letters to one receiver and
        # address share an ordering key, other receivers' never wait for them.
        routes = [Route(name, _Address, _Payload, namespace=f"{_KIND}{name}",
                        object_name=_object_name, address_kind=f"{_KIND}{name}")
                  for name in self.receivers]
        self.routes = Routes(*routes, namespaces=[r.namespace for r in routes])
        self.post = Post(actor, self.routes, purpose=purpose, policy=policy,
                         on_delivered=on_delivered, attempt_deadline_ms=attempt_deadline_ms,
                         deliver=self._deliver)

    def _route(self, receiver: str) -> Route[Any, Any]:
        route = self.routes.get(receiver)
        if route is None:
            raise InvalidRequest("no receiver of this outbox has that name",
                                 details={"receiver": receiver[:200],
                                          "receivers": sorted(self.receivers)})
        return route

    # ---- the producer's API ------------------------------------------------------------------

    def send(self, tx: SqlStorage, receiver: str, address: str, payload: str,
             key: str) -> PostRecord:
        """Inside the producer's ``transaction_sync``: stage ``payload`` for ``receiver`` at
        ``address`` and arm the wake (PO-10). A payload over ``MAX_PAYLOAD_CHARS`` is
        ``invalid_request``; a replay of ``key`` with another payload is ``conflict``."""
        if not isinstance(payload, str) or not isinstance(address, str):
            raise InvalidRequest("an outbox letter's address and payload are strings")
        return self.post.send(tx, self._route(receiver), _Address(address), _Payload(payload),
                              key)

    def latest(self, receiver: str, address: str) -> PostRecord | None:
        """The newest letter staged for this receiver and address, or its receipt."""
        self._route(receiver)
        return self.post.latest(f"{_KIND}{receiver}", _Address(address))

    def get(self, key: str) -> PostRecord | None:
        return self.post.get(key)

    def retry(self, tx: SqlStorage, key: str) -> RetryAction:
        """As ``Post.retry``: a failed letter is tried now, a dead one goes back in line."""
        return self.post.retry(tx, key)

    def dead_letters(self, after: str | None = None, limit: int = 32) -> DeadLetterPage:
        return self.post.dead_letters(after, limit)

    async def run(self) -> int:
        """The alarm purpose: deliver what is due; returns how many were delivered."""
        return await self.post.run()

    # ---- delivery --------------------------------------------------------------------------

    async def _deliver(self, job: Claimed, envelope: PostEnvelope, deadline_ms: int) -> Any:
        letter = OutboxLetter(key=job.key, receiver=job.route,
                              address=str(envelope.address.get("address", "")),
                              payload=str(envelope.event.get("payload", "")),
                              attempt=job.attempts, seq=job.seq, deadline_ms=deadline_ms)
        answer = await self.receivers[job.route](letter)
        return {"status": "delivered"} if answer is None else dict(answer)


def _object_name(address: _Address) -> str:
    return address.address
