"""Identities' addresses in the control database (IN-5): claiming them and resolving a recipient.

An address belongs to at most one identity; ``resolve`` answers only for an active identity, with
what the SMTP door needs to reach its IdentityMailbox. Nothing here logs an address.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from mailbox_actors.core.inbound.addresses import normalize_address
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

__all__ = ["Recipient", "add_addresses", "addresses_of", "normalize_all", "resolve"]


class Recipient(msgspec.Struct, frozen=True):
    """An address resolved to its identity and the identity's IdentityMailbox."""

    tenant_id: str
    identity_id: str
    mailbox_id: str


def normalize_all(addresses: Sequence[str]) -> list[str]:
    """Every address normalized, or ``invalid_request`` naming the position of a bad one."""
    out = []
    for i, a in enumerate(addresses):
        n = normalize_address(a)
        if n is None:
            raise InvalidRequest("an address must be a plain local@domain",
                                 details={"field": "address", "index": i})
        out.append(n)
    return list(dict.fromkeys(out))


async def add_addresses(db: ControlDb, identity_id: str, addresses: Sequence[str],
                        now_ms: int) -> list[str]:
    """Give the identity these addresses (idempotent); ``conflict`` if another identity holds
    one of them (then none is added)."""
    wanted = normalize_all(addresses)
    for a in wanted:
        row = await db.fetch_one("SELECT identity_id FROM addresses WHERE address = ?", (a,))
        if row is not None and row[0] != identity_id:
            raise MailboxActorsError(ErrorCode.CONFLICT, "the address belongs to another identity",
                                     details={"field": "address"})
    # INSERT OR IGNORE, then a re-check: a concurrent claim of the same address is seen.
    await db.batch([("INSERT OR IGNORE INTO addresses (address, identity_id, created_at_ms) "
                     "VALUES (?, ?, ?)", (a, identity_id, now_ms)) for a in wanted])
    for a in wanted:
        row = await db.fetch_one("SELECT identity_id FROM addresses WHERE address = ?", (a,))
        if row is None or row[0] != identity_id:
            raise MailboxActorsError(ErrorCode.CONFLICT, "the address belongs to another identity",
                                     details={"field": "address"})
    return wanted


async def addresses_of(db: ControlDb, identity_id: str) -> list[str]:
    rows = await db.fetch_all("SELECT address FROM addresses WHERE identity_id = ? ORDER BY "
                              "address", (identity_id,))
    return [str(r[0]) for r in rows]


async def resolve(db: ControlDb, address: str) -> Recipient | None:
    """The active identity that owns ``address``, or None (unknown, malformed or erased)."""
    a = normalize_address(address)
    if a is None:
        return None
    row = await db.fetch_one(
        "SELECT i.tenant_id, i.id, i.mailbox_id FROM addresses a JOIN identities i ON "
        "i.id = a.identity_id WHERE a.address = ? AND i.status = 'active'", (a,))
    return None if row is None else Recipient(tenant_id=row[0], identity_id=row[1],
                                              mailbox_id=row[2])
