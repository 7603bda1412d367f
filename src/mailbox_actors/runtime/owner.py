"""Who owns an object (RPC-3, RPC-4): the tenant (and identity) stored at init, and erasure.

The owner is runtime state in the actor's ``meta`` (``owner_tenant``, ``owner_identity``,
``erased``), written only through the runtime's side of the storage. The host checks every call
against it before the handler runs; an object's ``init`` claims it inside its own transaction.
"""

from __future__ import annotations

from typing import Any, Protocol

from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.wire.envelope import Envelope
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["OWNER_META_KEYS", "Owner", "OwnerMismatch", "OwnerRules"]

OWNER_META_KEYS = ("owner_tenant", "owner_identity", "erased")


class OwnerMismatch(MailboxActorsError):
    """The caller's tenant/identity is not the stored owner: always a bug upstream (RPC-3)."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.INTERNAL_ERROR, "the request's owner does not match the object")


class _Counter(Protocol):
    def inc(self, name: str, labels: tuple[tuple[str, str], ...] = (), value: float = 1) -> None:
        ...


class OwnerRules:
    """What every owner of one class on one host shares: the owner kind ("tenant" or
    "identity"), the namespace, the class's not-found code, and where a mismatch is reported."""

    __slots__ = ("kind", "log", "metrics", "namespace", "not_found")

    def __init__(self, kind: str, namespace: str, not_found: ErrorCode, metrics: _Counter,
                 log: Any) -> None:
        self.kind = kind
        self.namespace = namespace
        self.not_found = not_found
        self.metrics = metrics
        self.log = log


class Owner:
    """One activation's owner, as stored (its class's ``OwnerRules`` shared, not copied)."""

    __slots__ = ("erased", "identity", "object_id", "rules", "tenant")

    def __init__(self, meta: dict[str, str], object_id: str, rules: OwnerRules) -> None:
        self.tenant: str | None = meta.get("owner_tenant")
        self.identity: str | None = meta.get("owner_identity")
        self.erased = meta.get("erased") == "1"
        self.object_id = object_id
        self.rules = rules

    def check(self, call: Envelope[Any], is_init: bool, after_erase: bool = False) -> None:
        """Refuse a call for an erased, un-initialised or foreign object (before the handler).
        ``after_erase``: the request is one the class still serves once erased (its owner is
        checked all the same)."""
        if self.erased and not after_erase:
            raise MailboxActorsError(ErrorCode.IDENTITY_NOT_FOUND, "the identity was erased")
        if is_init:
            return
        if self.tenant is None:
            rules = self.rules
            raise MailboxActorsError(rules.not_found,
                                     f"no {rules.namespace} object has been initialised here")
        if call.tenant_id != self.tenant or (
                call.identity_id != self.identity and self.rules.kind == "identity"):
            self.mismatch(call)

    def mismatch(self, call: Envelope[Any]) -> None:
        rules = self.rules
        rules.metrics.inc("rpc_owner_mismatch_total", (("namespace", rules.namespace),))
        rules.log.warning(
            "rpc_owner_mismatch", security=True, namespace=rules.namespace,
            object_id=self.object_id, owner_tenant_id=self.tenant,
            owner_identity_id=self.identity, caller_tenant_id=call.tenant_id,
            caller_identity_id=call.identity_id)
        raise OwnerMismatch()

    def claim(self, call: Envelope[Any], storage: RuntimeStorage) -> bool:
        """Store the caller as owner (inside init's transaction). True when newly claimed; False
        when the same owner already holds it; a different owner is refused."""
        kind = self.rules.kind
        identity = call.identity_id if kind == "identity" else None
        if call.tenant_id is None or (kind == "identity" and identity is None):
            raise MailboxActorsError(
                ErrorCode.INVALID_REQUEST,
                f"init of {self.rules.namespace} needs tenant_id"
                + (" and identity_id" if kind == "identity" else "")
                + " in the envelope")
        if self.tenant is not None:
            if self.tenant != call.tenant_id or self.identity != identity:
                self.mismatch(call)
            return False
        storage.put_meta("owner_tenant", call.tenant_id)
        if identity is not None:
            storage.put_meta("owner_identity", identity)
        self.tenant, self.identity = call.tenant_id, identity
        return True

    def mark_erased(self, storage: RuntimeStorage) -> None:
        storage.put_meta("erased", "1")
        self.erased = True
