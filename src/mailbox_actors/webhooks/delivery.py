"""Webhook delivery (Q-4): the ``webhooks`` queue's consumer POSTs each event, signed, to its tenant.

Each message re-reads its tenant from the control database (Q-3), answers a 2xx with an ack, and any
other answer, connection failure or timeout with a re-enqueued copy (``attempt`` + 1, seed section 7)
until the schedule is spent, then dead-letters it. It must never log or expose the webhook secret,
the endpoint URL or the event body, and one slow endpoint must never hold up other tenants. The
signature and headers are ``webhook_signature``'s (re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import anyio
import msgspec

from mailbox_actors.http.client import (
    HttpConnectError,
    HttpConnectionLost,
    HttpPool,
    HttpProtocolError,
    HttpTimeout,
    HttpTlsError,
)
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.logging import bound_request_id, get_logger
from mailbox_actors.platform.metrics import Metrics
from mailbox_actors.platform.queues import MAX_DELAY_SECONDS, Consumer, Message, QueueService
from mailbox_actors.platform.rng import Rng
from mailbox_actors.webhooks.publish import WEBHOOKS_QUEUE
from mailbox_actors.webhooks.signature import (
    ATTEMPT_HEADER,
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    sign,
    verify,
)
from mailbox_actors.webhooks.targets import Refused, decode_job, target_of, tls_context
from mailbox_actors.webhooks.tenant_limits import SLOT_WAIT_S, TenantReads, TenantSlots
from mailbox_actors.wire.events import WebhookMessage

__all__ = [
    "DEFAULT_SCHEDULE_S",
    "EVENT_ID_HEADER",
    "EVENT_TYPE_HEADER",
    "SIGNATURE_HEADER",
    "WebhookDeliverer",
    "sign",
    "tls_context",
    "verify",
]

DEFAULT_SCHEDULE_S: tuple[float, ...] = (1, 5, 30, 120, 600, 1800, 3600)

_log = get_logger("mailbox_actors.webhooks")
_encode = msgspec.json.Encoder().encode


# ---- delivery ------------------------------------------------------------------------------------


class WebhookDeliverer:
    """Delivers the ``webhooks`` queue; ``handle`` is the consumers' handler, ``consumers()`` makes them.

    A failed attempt is tried again after ``schedule_s[attempt]`` seconds plus up to
    ``jitter_fraction`` of it; after ``len(schedule_s)`` retries the message is dead-lettered.
    At most ``max_in_flight_per_tenant`` attempts per tenant run at once (default: one fewer than
    the consumers), so a slow endpoint leaves a consumer free for everyone else; a message over
    that cap is deferred (re-sent unchanged after about as long as the tenant's oldest attempt in
    flight has run, at most ``attempt_timeout_s``: ``_defer``), not counted as an attempt.
    https endpoints are verified against the system's CAs, or only ``ca_file``'s when given.
    """

    def __init__(self, control_db: ControlDb, queues: QueueService, *, clock: Clock, rng: Rng,
                 pool: HttpPool | None = None, metrics: Metrics | None = None,
                 attempt_timeout_s: float = 10.0, schedule_s: Sequence[float] = DEFAULT_SCHEDULE_S,
                 jitter_fraction: float = 0.1, max_in_flight_per_tenant: int | None = None,
                 ca_file: str | None = None) -> None:
        if not (math.isfinite(attempt_timeout_s) and 0 < attempt_timeout_s <= 300):
            raise ValueError("attempt_timeout_s must be in (0, 300]")
        if not 0 <= jitter_fraction <= 1:
            raise ValueError("jitter_fraction must be in [0, 1]")
        if any(not (math.isfinite(d) and 0 <= d * (1 + jitter_fraction) <= MAX_DELAY_SECONDS)
               for d in schedule_s):
            raise ValueError(f"every delay of schedule_s, with jitter, must be 0 to "
                             f"{MAX_DELAY_SECONDS} seconds")
        if max_in_flight_per_tenant is not None and max_in_flight_per_tenant < 1:
            raise ValueError("max_in_flight_per_tenant must be >= 1")
        self._db = control_db
        self._queues = queues
        self._clock = clock
        self._rng = rng
        self._own_pool = pool is None
        self._pool = pool if pool is not None else HttpPool(
            connect_timeout_s=min(5.0, attempt_timeout_s), max_response_bytes=1024 * 1024,
            # Below the 5 s keep-alive of common servers, so a reused connection is not one the
            # receiver is closing.
            # The system's CAs are loaded by the pool at its first https connection (36 ms of
            # every node start otherwise, for endpoints most nodes never have); a CA file is
            # loaded here, so a bad one is refused at start.
            idle_timeout_s=4.0, ssl_context=None if ca_file is None else tls_context(ca_file))
        self._metrics = metrics
        self.attempt_timeout_s = attempt_timeout_s
        self.schedule_s = tuple(float(d) for d in schedule_s)
        self.jitter_fraction = jitter_fraction
        self.max_in_flight_per_tenant = max_in_flight_per_tenant
        self._slots = TenantSlots()
        self._tenants = TenantReads(control_db, clock)
        if metrics is not None:
            for name, text in (
                    ("webhooks_delivered_total", "Events a webhook endpoint accepted (2xx)"),
                    ("webhooks_retried_total", "Failed webhook attempts scheduled again"),
                    ("webhooks_failed_total", "Webhook events dead-lettered after their budget"),
                    ("webhooks_skipped_total", "Webhook events with no tenant or endpoint"),
                    ("webhooks_deferred_total", "Webhook events deferred: their tenant was at its "
                     "in-flight cap")):
                metrics.describe(name, text, "counter",
                                 ("reason",) if name == "webhooks_skipped_total" else ())
            metrics.describe("webhook_attempt_seconds", "Webhook POST durations", "histogram")

    def consumers(self, *, count: int = 8, max_batch_size: int = 1,
                  poll_interval_s: float = 0.05) -> list[Consumer]:
        """``count`` competing consumers of the ``webhooks`` queue. One message per batch by default,
        so a slow endpoint never holds another tenant's message in its batch; no batch timeout.

        ``count`` is the node's ``webhook_consumers`` (8 by default, 4 before session 19): a
        tenant may have all but one of them in flight. Each attempt holds its consumer for the
        endpoint's answer, so a tenant's events per second on a node are at most that cap over
        its endpoint's answer time; with 3 (4 consumers) the consumers, not the pipeline before
        them, were the wait in the tail of commit-to-webhook (stage marks, session 19)."""
        if count < 1:
            raise ValueError("count must be >= 1")
        if self.max_in_flight_per_tenant is None:
            self.max_in_flight_per_tenant = max(1, count - 1)
        # The lease outlives an attempt and a slot wait, so a live delivery is never handed out again.
        visibility_ms = max(30_000, round((2 * self.attempt_timeout_s + 5) * 1000))
        return [Consumer(self._queues, WEBHOOKS_QUEUE, self.handle, max_batch_size=max_batch_size,
                         max_batch_timeout_s=0, visibility_ms=visibility_ms,
                         poll_interval_s=poll_interval_s) for _ in range(count)]

    async def aclose(self) -> None:
        """Close the HTTP pool if this deliverer made it."""
        if self._own_pool:
            await self._pool.aclose()

    # ---- one message -----------------------------------------------------------------------------

    async def handle(self, msg: Message) -> None:
        attempt = msg.body.get("attempt", 0)
        try:
            if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
                raise Refused('invalid body: "attempt" must be an integer >= 0')
            job = decode_job(msg.body)
        except Refused as exc:
            await self._give_up(msg, None, str(exc))
            return
        ids: dict[str, Any] = {"message_id": msg.id, "event_id": job.event.id,
                               "tenant_id": job.tenant_id, "attempt": attempt + 1}
        tenant = await self._tenants.get(job.tenant_id)  # never trust the pointer blindly
        if tenant is None or tenant.status != "active" or not tenant.webhook_url \
                or not tenant.webhook_secret:
            why = "no_tenant" if tenant is None else (
                "tenant_inactive" if tenant.status != "active" else "no_webhook")
            self._inc("webhooks_skipped_total", (("reason", why),))
            _log.info("webhook_skipped", reason=why, **ids)
            return  # the consumer acks it
        try:
            base_url, path = target_of(tenant.webhook_url)
        except Refused as exc:
            await self._give_up(msg, ids, str(exc))
            return
        if not await self._slots.take(job.tenant_id, msg.id, self.max_in_flight_per_tenant):
            await self._defer(msg, ids, job.tenant_id)
            return
        try:
            outcome = await self._post(base_url, path, job, tenant.webhook_secret, attempt)
        finally:
            self._slots.free(job.tenant_id, msg.id)
        if outcome is None:
            self._inc("webhooks_delivered_total")  # the consumer acks it (queue_acks)
        elif isinstance(outcome, Refused):
            await self._give_up(msg, ids, str(outcome))
        elif attempt < len(self.schedule_s):
            await self._again(msg, ids, attempt, outcome)
        else:
            tries = attempt + 1
            await self._give_up(msg, ids, f"{outcome} after {tries} attempt{'s' * (tries != 1)}")

    async def _post(self, base_url: str, path: str, job: WebhookMessage, secret: str,
                    attempt: int) -> str | Refused | None:
        """One attempt: None when accepted, else what went wrong (never the URL or the body)."""
        body = _encode(job.event)
        headers = {"content-type": "application/json",
                   SIGNATURE_HEADER: sign(secret, self._clock.now_ms() // 1000, body),
                   EVENT_ID_HEADER: job.event.id, EVENT_TYPE_HEADER: job.event.type,
                   ATTEMPT_HEADER: str(attempt + 1)}
        request_id = bound_request_id()
        if isinstance(request_id, str):  # the delivery's own (the queue consumer minted it)
            headers[REQUEST_ID_HEADER] = request_id
        started = anyio.current_time()
        outcome: str | Refused | None = "timeout"
        # The pool enforces the timeout; this scope is the backstop that keeps a consumer free.
        with anyio.move_on_after(self.attempt_timeout_s + 1):
            try:
                status, _ = await self._pool.request(base_url, "POST", path, headers, body,
                                                     timeout_s=self.attempt_timeout_s)
                outcome = None if 200 <= status < 300 else f"http {status}"
            except HttpTimeout:
                outcome = "timeout"
            except HttpTlsError as exc:  # its text names the host: never logged
                outcome = ("tls certificate not accepted (not trusted, or not for this host)"
                           if exc.certificate else "tls handshake failed")
            except HttpConnectError:
                outcome = "connect failed"
            except HttpConnectionLost:
                outcome = "connection lost"
            except HttpProtocolError:
                outcome = "invalid http answer"
            except ValueError:  # a header or path the pool refuses to send (CR, LF, ...)
                outcome = Refused("the request cannot be framed (event id or type, or the URL)")
        if self._metrics is not None:
            self._metrics.observe("webhook_attempt_seconds", anyio.current_time() - started)
        return outcome

    async def _again(self, msg: Message, ids: dict[str, Any], attempt: int, outcome: str) -> None:
        """Seed section 7's re-enqueue: a copy with ``attempt`` + 1 after the schedule's delay, then
        the ack (a crash in between delivers twice, which receivers deduplicate)."""
        base = self.schedule_s[attempt]
        delay_s = round(base * (1 + self.jitter_fraction * self._rng.random()), 3)
        await self._queues.send(WEBHOOKS_QUEUE, {**msg.body, "attempt": attempt + 1},
                                delay_seconds=delay_s)
        await msg.ack()
        self._inc("webhooks_retried_total")
        _log.warning("webhook_attempt_failed", outcome=outcome, retry_in_s=delay_s, **ids)

    async def _defer(self, msg: Message, ids: dict[str, Any], tenant_id: str) -> None:
        """Re-send the message unchanged (not an attempt) after about as long as the tenant's
        endpoint is slow (``TenantSlots.busy_s``: how long its oldest attempt in flight has run,
        or its last finished one ran if longer), at least ``SLOT_WAIT_S``, at most the attempt
        timeout, plus the jitter. That is what this node knows of the endpoint's answer time
        now; a flat attempt timeout sent an event of an endpoint busy for a quarter second (a
        loaded node) 10 s late (commit-to-webhook p99 11.9 s, session 19). Looked at again after
        its age, the same attempt is twice as old, so a message deferred again and again waits
        0.25, 0.5, 1, 2, 4, 8, then 10 s: an endpoint slow for a moment delays its events about
        as long again as it was slow (a doubling, not a guess of how long it will stay slow).
        A hung endpoint's attempts end at the timeout, and from then on its last finished
        attempt says so: its waiting events are deferred the full timeout at once, as before,
        instead of climbing the ladder again (six re-sends each, queue writes on the consumers
        the others need) with each new set of attempts. Less than ``SLOT_WAIT_S`` would re-send
        faster than a delivery waits for a slot; more than the timeout would wait past every
        attempt's end."""
        busy_s = min(self.attempt_timeout_s, max(SLOT_WAIT_S, self._slots.busy_s(tenant_id)))
        delay_s = round(busy_s * (1 + self.jitter_fraction * self._rng.random()), 3)
        await self._queues.send(WEBHOOKS_QUEUE, dict(msg.body), delay_seconds=delay_s)
        await msg.ack()
        self._inc("webhooks_deferred_total")
        _log.info("webhook_deferred", retry_in_s=delay_s, **ids)

    async def _give_up(self, msg: Message, ids: dict[str, Any] | None, reason: str) -> None:
        """Dead-letter the message with ``reason`` through the queue's own facility, so the letter is
        recorded under the ``webhooks`` queue with why it failed."""
        _log.error("webhook_dead_lettered", reason=reason,
                   **(ids if ids is not None else {"message_id": msg.id}))
        self._inc("webhooks_failed_total")
        await msg.give_up(reason)

    def _inc(self, name: str, labels: tuple[tuple[str, str], ...] = ()) -> None:
        if self._metrics is not None:
            self._metrics.inc(name, labels)


