"""The tenant roster, a flow on Post (PO-1..PO-5): every IdentityMailbox tells its tenant's
TenantQuota that it joined (at ``init``) and left (at ``erase``), in order and exactly once.

The mailbox sends inside the transaction of its own change; TenantQuota admits each event in the
transaction that applies it. The quota is the object named by the tenant id in ``tenant_quota``;
one that is not initialised answers ``tenant_not_found``, a definite refusal: the letter is
dead (its reason says why) until an operator retries it, also once the mailbox is erased (its
Post records are not the erased content: ``post_dead_letters`` and ``post_retry`` still answer);
a joined letter applied after the left one leaves the identity left. Tables: ``roster`` and
``roster_counts`` in the quota's file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.post.routes import Route, Routes
from mailbox_actors.wire.post import PostEnvelope
from mailbox_actors.wire.roster import MemberJoined, MemberLeft, RosterAddress, RosterReply

if TYPE_CHECKING:  # the sender's side: TenantQuota only receives, and never loads it
    from mailbox_actors.post.actor_post import Post

__all__ = ["JOINED", "LEFT", "ROSTER", "ROSTER_SCHEMA", "apply", "read", "send_joined",
           "send_left"]

QUOTA_NAMESPACE = "tenant_quota"


def _name(a: RosterAddress) -> str:
    return a.tenant_id


JOINED: Route[RosterAddress, MemberJoined] = Route(
    "member_joined", RosterAddress, MemberJoined, namespace=QUOTA_NAMESPACE, object_name=_name,
    address_kind="tenant")
LEFT: Route[RosterAddress, MemberLeft] = Route(
    "member_left", RosterAddress, MemberLeft, namespace=QUOTA_NAMESPACE, object_name=_name,
    address_kind="tenant")
# Declared beside TenantQuota's own module, which imports this one: the namespace is named here.
ROSTER = Routes(JOINED, LEFT, namespaces=(QUOTA_NAMESPACE,))

ROSTER_SCHEMA = (
    "CREATE TABLE roster (identity_id TEXT PRIMARY KEY, mailbox_id TEXT, joined_at_ms INTEGER, "
    "left_at_ms INTEGER) WITHOUT ROWID",
    "CREATE TABLE roster_counts (id INTEGER PRIMARY KEY CHECK (id = 1), joined INTEGER NOT NULL, "
    "left INTEGER NOT NULL)",
    "INSERT INTO roster_counts (id, joined, left) VALUES (1, 0, 0)",
)


def send_joined(post: Post, tx: SqlStorage, tenant_id: str, identity_id: str,
                mailbox_id: str) -> None:
    post.send(tx, JOINED, RosterAddress(tenant_id), MemberJoined(identity_id, mailbox_id),
              f"roster:{identity_id}:joined")


def send_left(post: Post, tx: SqlStorage, tenant_id: str, identity_id: str) -> None:
    post.send(tx, LEFT, RosterAddress(tenant_id), MemberLeft(identity_id),
              f"roster:{identity_id}:left")


def apply(tx: SqlStorage, route: Route[Any, Any], address: Any, event: Any,
          env: PostEnvelope) -> dict[str, Any]:
    """In TenantQuota's transaction: apply one roster event (admission commits with it)."""
    now = tx.now_ms()
    if isinstance(event, MemberJoined):
        # A left identity stays left: identity ids are never reused, and a joined letter retried
        # after its left one (a dead letter put back in line) must not bring it back.
        tx.exec("INSERT INTO roster (identity_id, mailbox_id, joined_at_ms) VALUES (?, ?, ?) "
                "ON CONFLICT (identity_id) DO UPDATE SET mailbox_id = excluded.mailbox_id, "
                "joined_at_ms = excluded.joined_at_ms", event.identity_id,
                event.mailbox_id, now)
        tx.exec("UPDATE roster_counts SET joined = joined + 1 WHERE id = 1")
    else:
        tx.exec("INSERT INTO roster (identity_id, left_at_ms) VALUES (?, ?) "
                "ON CONFLICT (identity_id) DO UPDATE SET left_at_ms = excluded.left_at_ms",
                event.identity_id, now)
        tx.exec("UPDATE roster_counts SET left = left + 1 WHERE id = 1")
    return {"applied_at_ms": now}


def read(sql: SqlStorage) -> RosterReply:
    joined, left = sql.exec("SELECT joined, left FROM roster_counts WHERE id = 1").one()
    active = sql.exec("SELECT count(*) FROM roster WHERE joined_at_ms IS NOT NULL "
                      "AND left_at_ms IS NULL").one()[0]
    return RosterReply(active=active, joined=joined, left=left)
