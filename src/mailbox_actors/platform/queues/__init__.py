"""Durable at-least-once queues for a cluster (Q-1, Q-2): the public face of ``queue_*`` modules.

Every node process opens the same SQLite file through a ``QueueService`` (or, with ``--postgres``,
the same PostgreSQL database: ``queues.postgres.queues_on``, CL-7); a ``Consumer`` per queue
handles batches one message at a time, and a ``DeadLetterRecorder`` consumes each dead-letter queue::

    async with QueueService(data_dir / "queues.sqlite", clock=clock, ids=ids) as queues:
        await queues.send("webhooks", {"v": 1, "kind": "event", "event_id": "evt_..."})

        async def deliver(msg: Message) -> None:
            await post(msg.body["event_id"])  # the effect commits...
            await msg.ack()                   # ...then the ack (returning unsettled acks too)

        consumer = Consumer(queues, "webhooks", deliver, max_batch_timeout_s=0)
        recorder = DeadLetterRecorder(queues, consumer.dead_letter_queue)
        # run both: tg.start_soon(consumer.run); tg.start_soon(recorder.run)
        # or on a FakeClock: clock.attach(consumer); clock.attach(recorder)

A handler that raises has its message retried, then dead-lettered after ``max_retries``. That is the
queue's guard against bugs. A consumer's own budget for known transient failures never uses
``msg.attempts`` (seed section 7); it is one of two schemes:

- Re-enqueue: the body carries ``attempt``; send a copy with ``attempt + 1`` and the schedule's
  delay, then ack the original::

      new_id = await reenqueue_with_attempt(queues, "webhooks", msg.body, (2, 4, 8, 16))
      if new_id is None:
          await record_failure(msg.body["event_id"])  # schedule spent
      await msg.ack()

- Age: from a timestamp the consumer owns, retry through the queue until the age limit (give the
  queue a ``max_retries`` that covers the window)::

      if age_ms(msg.body["created_at_ms"], clock) < 3_600_000:
          await msg.retry(delay_seconds=60)
      else:
          await record_failure(msg.body["event_id"])
          await msg.ack()
"""

from __future__ import annotations

from mailbox_actors.platform.queues.bodies import (
    MAX_BATCH_SIZE,
    MAX_BODY_BYTES,
    MAX_DELAY_SECONDS,
    QUEUE_NAME_RE,
)
from mailbox_actors.platform.queues.consumer import (
    Consumer,
    DeadLetterRecorder,
    Handler,
    age_ms,
    reenqueue_with_attempt,
)
from mailbox_actors.platform.queues.message import DeadLetterInfo, Message
from mailbox_actors.platform.queues.service import QueueService, QueueWatcher

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_BODY_BYTES",
    "MAX_DELAY_SECONDS",
    "QUEUE_NAME_RE",
    "Consumer",
    "DeadLetterInfo",
    "DeadLetterRecorder",
    "Handler",
    "Message",
    "QueueService",
    "QueueWatcher",
    "age_ms",
    "reenqueue_with_attempt",
]
