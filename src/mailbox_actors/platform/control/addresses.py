"""Identities' addresses in the control database (IN-5): claiming them and resolving a recipient.

An address belongs to at most one identity; ``resolve`` answers only for an active identity, with
what the SMTP door needs to reach its IdentityMailbox. ``AddressBook`` is the door's resolver:
it keeps what it resolved (found or not) while the control database's ``address_epoch`` (bumped
by triggers on every change to addresses and identities, by any process) stands. On the SQLite
file it reads that count with a point read on its own read-only connection, on the calling
thread: no hand-off to the database's worker thread per recipient; and once a turn of the event
loop, not once a recipient (the door's sessions resumed in one turn share it; while the file is
being written the read cost 11.5 us where it costs 2 on a quiet one): a change committed during
a turn is seen from the next turn on, as if it had committed just after that turn's read. On
PostgreSQL the trigger
also notifies ``ma_address_epoch`` and the count is the notifications heard: a recipient the book
knows costs no round trip at all, and while the listening connection is down nothing is kept.
Nothing here logs an address.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import msgspec

from mailbox_actors.core.inbound.addresses import normalize_address
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.shared_store import Notifications
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

__all__ = ["EPOCH_CHANNEL", "AddressBook", "Recipient", "add_addresses", "addresses_of", "normalize_all",
           "resolve"]


EPOCH_CHANNEL = "ma_address_epoch"  # notified by the PostgreSQL schema's trigger


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
    insert = db.store.dialect.ignore_duplicates("addresses (address, identity_id, created_at_ms)",
                                                "VALUES (?, ?, ?)")
    await db.batch([(insert, (a, identity_id, now_ms)) for a in wanted])
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


class _FileEpoch:
    """The count read from the SQLite file on a read-only connection of its own."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None

    def read(self) -> int | None:
        """The change count now, or None when it cannot be read (then nothing is kept)."""
        try:
            if self._conn is None:
                # timeout 0: a lock (which WAL readers meet only in recovery) is a miss, not a wait
                self._conn = sqlite3.connect(self._path.absolute().as_uri() + "?mode=ro",
                                             uri=True, timeout=0, isolation_level=None)
            row = self._conn.execute("SELECT n FROM address_epoch WHERE id = 1").fetchone()
        except sqlite3.Error:
            self.close()  # reopened at the next look
            return None
        return None if row is None else int(row[0])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _HeardEpoch:
    """The count of ``ma_address_epoch`` notifications heard (and of reconnections: one may have
    been missed then); None while nobody listens."""

    def __init__(self, notifications: Notifications) -> None:
        self._notifications = notifications
        self._heard = 0
        self._listening = False  # until the channel is listened to, a change could pass unheard
        notifications.subscribe(EPOCH_CHANNEL, self._hear)

    def _hear(self, payload: str | None) -> None:
        self._heard += 1
        if payload is None:  # the channel is listened to (again) from now on
            self._listening = True

    def read(self) -> int | None:
        if not self._listening or self._notifications.generation is None:
            return None
        return self._heard

    def close(self) -> None:
        pass


def epoch_of(db: ControlDb) -> _FileEpoch | _HeardEpoch | None:
    """How an address book learns that what resolves an address changed (None: it cannot)."""
    if db.path is not None:
        return _FileEpoch(db.path)
    notifications = db.store.notifications()
    return None if notifications is None else _HeardEpoch(notifications)


class AddressBook:
    """``await book.resolve(address)``: as ``resolve``, from memory while nothing that decides it
    changed; ``book.close()`` when done. On PostgreSQL make the book before the control database
    is opened (its listening connection starts then)."""

    def __init__(self, db: ControlDb, *, max_entries: int = 10_000) -> None:
        self._db = db
        self._max = max_entries
        self._known: dict[str, Recipient | None] = {}
        self._epoch: int | None = None
        self._source = epoch_of(db)
        self._this_turn: tuple[int | None] | None = None  # the count read in this turn, if read

    async def resolve(self, address: str) -> Recipient | None:
        epoch = self._epoch_now()
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

    def _epoch_now(self) -> int | None:
        """The source's count, read at most once a turn of the event loop (module docstring)."""
        if self._this_turn is not None:
            return self._this_turn[0]
        epoch = None if self._source is None else self._source.read()
        self._this_turn = (epoch,)
        asyncio.get_running_loop().call_soon(self._next_turn)  # runs in the next turn
        return epoch

    def _next_turn(self) -> None:
        self._this_turn = None

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
