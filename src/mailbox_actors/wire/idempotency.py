"""Which ops of each namespace may be sent twice with the same effect as once (OPS-6), so that the
client retries only those after a retryable error.

Each actor class declares its own set (``Actor.idempotent_ops``, default none); this table is what
a client that cannot import the objects reads, and a test holds every class of the default objects
to it. An op missing here is never retried automatically (a caller may still say
``idempotent=True`` for one call).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["IDEMPOTENT_OPS"]

IDEMPOTENT_OPS: Mapping[str, frozenset[str]] = {
    "tenant_quota": frozenset({"init", "status", "usage", "reserve", "release"}),
    "domain_monitor": frozenset({"init", "status", "check"}),
    "notifier": frozenset({"init", "status", "set_recipients", "get_email"}),
    "identity_mailbox": frozenset({"init", "status", "erase", "get_events", "get_email",
                                   "submit", "cancel", "apply_delivery_event",
                                   "ingest", "get_message", "get_thread", "list_messages",
                                   "wait_poll", "get_raw_message", "get_attachment"}),
}
