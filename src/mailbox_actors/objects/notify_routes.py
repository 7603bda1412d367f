"""DomainMonitor's state events to the tenant's Notifier, a flow on Post (OBJ-4, PO-1..PO-5).

Declared apart from both ends, as the roster is: DomainMonitor sends on ``NOTIFY`` inside the
transaction of its state change; Notifier admits each event in the transaction that turns it into
an email. A tenant without a Notifier answers ``tenant_not_found``, a definite refusal: the letter
is dead until an operator retries it (``post_dead_letters``, ``post_retry`` on the monitor).
"""

from __future__ import annotations

from mailbox_actors.post.routes import Route, Routes
from mailbox_actors.wire.notifier import DomainStateChanged, NotifierAddress, StateKind

__all__ = ["NOTIFIER_NAMESPACE", "NOTIFY", "NOTIFY_KINDS", "NOTIFY_ROUTES"]

NOTIFIER_NAMESPACE = "notifier"
# The state events a Notifier hears of, by their event type.
NOTIFY_KINDS: dict[str, StateKind] = {"domain.failing": "domain.failing",
                                      "domain.failed": "domain.failed",
                                      "domain.recovered": "domain.recovered"}


def _name(a: NotifierAddress) -> str:
    return a.tenant_id


# One route: every kind for one tenant keeps the producer's order.
NOTIFY: Route[NotifierAddress, DomainStateChanged] = Route(
    "domain_state", NotifierAddress, DomainStateChanged, namespace=NOTIFIER_NAMESPACE,
    object_name=_name, address_kind="tenant")
NOTIFY_ROUTES = Routes(NOTIFY, namespaces=(NOTIFIER_NAMESPACE,))
