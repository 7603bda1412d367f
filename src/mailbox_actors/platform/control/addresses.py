"""Identities' addresses in the control database (IN-5): claiming them and resolving a recipient.

An address belongs to at most one identity; ``resolve`` answers only for an active identity, with
what the SMTP door needs to reach its IdentityMailbox. ``AddressBook`` is the door's resolver:
it keeps what it resolved (found or not) while the control database's ``address_epoch`` (bumped
by triggers on every change to addresses and identities, by any process) stands, and reads that
count with a point read on its own read-only connection, on the calling thread: no hand-off to
the database's worker thread per recipient. Nothing here logs an address.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from mailbox_actors.core.inbound.addresses import normalize_address
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

__all__ = ["AddressBook", "Recipient", "add_addresses", "addresses_of", "normalize_all",
           "resolve"]


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


class AddressBook:
    """``await book.resolve(address)``: as ``resolve``, from memory while nothing that decides it
    changed; ``book.close()`` when done."""

    def __init__(self, db: ControlDb, *, max_entries: int = 10_000) -> None:
        self._db = db
        self._max = max_entries
        self._known: dict[str, Recipient | None] = {}
        self._epoch: int | None = None
        self._conn: sqlite3.Connection | None = None

    def _read_epoch(self) -> int | None:
        """The change count now, or None when it cannot be read (then nothing is kept)."""
        try:
            if self._conn is None:
                # timeout 0: a lock (which WAL readers meet only in recovery) is a miss, not a wait
                self._conn = sqlite3.connect(self._db.path.absolute().as_uri() + "?mode=ro",
                                             uri=True, timeout=0, isolation_level=None)
            row = self._conn.execute("SELECT n FROM address_epoch WHERE id = 1").fetchone()
        except sqlite3.Error:
            self.close()  # reopened at the next look
            return None
        return None if row is None else int(row[0])

    async def resolve(self, address: str) -> Recipient | None:
        epoch = self._read_epoch()
        if epoch is None:
            self._known.clear()
            return await resolve(self._db, address)
        if epoch != self._epoch:
            self._known.clear()
            self._epoch = epoch
        if address in self._known:
            return self._known[address]
        found = await resolve(self._db, address)
        # Read after the count: a change meanwhile bumps it, and the next look drops this entry.
        if self._epoch == epoch:
            if len(self._known) >= self._max:
                self._known.clear()
            self._known[address] = found
        return found

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
