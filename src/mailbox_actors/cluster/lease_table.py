"""The cluster's rows in PostgreSQL (CL-8, CL-9, CL-12): the cluster (S, the id secret's
fingerprint, the failover policy), its machines, and one lease per slot.

Every expiry is judged by the database's ``now()``, never by a machine's clock. A take is one
compare-and-set ``UPDATE`` that bumps the slot's epoch; a renewal is fenced on (machine, epoch),
so a machine whose lease was taken over cannot extend the new holder's; leaving is fenced alike.
Nothing here waits on its own: the caller bounds each call (``LeaseKeeper``) and a connection
that failed or was cut is dropped and made again at the next call.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from mailbox_actors.platform.postgres.migrations import Schema, apply_schema
from mailbox_actors.platform.processes import pid_alive
from mailbox_actors.runtime.settings import SettingsError

__all__ = ["MACHINES", "ClusterRow", "LeaseTable", "MachineRow", "SlotRow", "TableUnreachable"]

# The component's migrations (``platform.postgres.migrations``: append only), applied by
# ``slots create`` and checked by every machine at start (a newer schema is refused).
MACHINES = Schema("machines", ((
    """CREATE TABLE ma_cluster (
        id integer PRIMARY KEY CHECK (id = 1),
        slots integer NOT NULL,
        id_fingerprint text NOT NULL,
        slot_failover text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now())""",
    """CREATE TABLE ma_machines (
        name text PRIMARY KEY,
        url text NOT NULL DEFAULT '',
        host text NOT NULL DEFAULT '',
        pid integer NOT NULL DEFAULT 0,
        instance text NOT NULL DEFAULT '',
        started_at timestamptz,
        seen_at timestamptz,
        draining boolean NOT NULL DEFAULT false)""",
    """CREATE TABLE ma_slot_leases (
        slot integer PRIMARY KEY,
        home text NOT NULL,
        holder text,
        epoch bigint NOT NULL DEFAULT 0,
        expires_at timestamptz NOT NULL DEFAULT '-infinity',
        taken_at timestamptz,
        renewed_at timestamptz)""",
),))
_LOCK_KEY = 0x6D61_5F73_6C6F  # the advisory lock creation holds ("ma_slo")
POLICIES = ("local", "shared")


class TableUnreachable(Exception):
    """PostgreSQL did not answer (down, cut off, or the connection broke)."""


@dataclass(frozen=True, slots=True)
class ClusterRow:
    slots: int
    id_fingerprint: str
    slot_failover: str


@dataclass(frozen=True, slots=True)
class SlotRow:
    """One slot as ``status`` and the routing map see it."""

    slot: int
    home: str
    holder: str | None  # None: nobody holds it now (never taken, left, or expired)
    epoch: int
    live: bool  # the lease has not expired by the database's clock
    url: str | None  # the holder's HTTP address
    renewed_age_s: float | None  # seconds since its last renewal, by the database's clock


@dataclass(frozen=True, slots=True)
class MachineRow:
    name: str
    url: str
    host: str
    pid: int
    seen_age_s: float | None
    draining: bool


class LeaseTable:
    """One machine's (or one command's) connection to the cluster's rows."""

    def __init__(self, dsn: str, *, connect_timeout_s: float = 3.0) -> None:
        self.dsn = dsn
        self._timeout = max(1, int(connect_timeout_s))
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            try:
                self._conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, connect_timeout=self._timeout,
                    application_name="mailbox-actors")
            except psycopg.Error as e:
                raise TableUnreachable(type(e).__name__) from e
        return self._conn

    async def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        conn = await self._connection()
        try:
            cur = await conn.execute(sql, args)
            return list(await cur.fetchall()) if cur.description is not None else []
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            await self.drop()
            raise TableUnreachable(type(e).__name__) from e
        except BaseException:  # cancelled mid-statement: the connection's state is unknown
            await self.drop()
            raise

    async def drop(self) -> None:
        """Forget the connection (after an error or a cut-off call); the next call makes one."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass

    async def close(self) -> None:
        await self.drop()

    # ---- the cluster (CL-8) --------------------------------------------------------------

    async def create(self, slots: int, id_fingerprint: str, machines: Sequence[str],
                     slot_failover: str) -> bool:
        """Make the cluster's tables and rows once: S slots, their homes round-robin over
        ``machines``. False when the cluster exists already (with the same S and secret: a
        second ``create`` changes nothing); raises SettingsError when it exists otherwise."""
        if slot_failover not in POLICIES:
            raise SettingsError(f"setting 'slot_failover' must be local or shared "
                                f"(got {slot_failover!r})")
        conn = await self._connection()
        try:
            await apply_schema(conn, MACHINES)
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                cur = await conn.execute("SELECT slots, id_fingerprint, slot_failover "
                                         "FROM ma_cluster")
                row = await cur.fetchone()
                if row is not None:
                    check_cluster(ClusterRow(*row), slots, id_fingerprint)
                    return False
                await conn.execute("INSERT INTO ma_cluster (id, slots, id_fingerprint, "
                                   "slot_failover) VALUES (1, %s, %s, %s)",
                                   (slots, id_fingerprint, slot_failover))
                for name in machines:
                    await conn.execute("INSERT INTO ma_machines (name) VALUES (%s) "
                                       "ON CONFLICT DO NOTHING", (name,))
                cur = conn.cursor()
                await cur.executemany("INSERT INTO ma_slot_leases (slot, home) VALUES (%s, %s)",
                                      [(k, machines[k % len(machines)]) for k in range(slots)])
            return True
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            await self.drop()
            raise TableUnreachable(type(e).__name__) from e

    async def migrate(self) -> None:
        """Bring the tables to this code's version; a newer schema is refused (SchemaTooNew)."""
        conn = await self._connection()
        try:
            await apply_schema(conn, MACHINES)
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            await self.drop()
            raise TableUnreachable(type(e).__name__) from e

    async def cluster(self) -> ClusterRow | None:
        try:
            rows = await self._rows("SELECT slots, id_fingerprint, slot_failover FROM ma_cluster")
        except psycopg.errors.UndefinedTable:
            return None
        return ClusterRow(*rows[0]) if rows else None

    # ---- machines --------------------------------------------------------------------------

    async def register(self, name: str, url: str, instance: str, ttl_s: float) -> None:
        """Say machine ``name`` runs here now (its URL for the routing map). Refused (SettingsError)
        when another live process holds the name: on another host, or alive on this one."""
        host = socket.gethostname()
        rows = await self._rows(
            "SELECT host, pid, extract(epoch FROM now() - seen_at), draining FROM ma_machines "
            "WHERE name = %s", (name,))
        if not rows:
            raise SettingsError(f"setting 'machine': {name!r} is not a machine of this cluster "
                                "(see 'mailbox-actors slots status')")
        other_host, other_pid, age, _ = rows[0]
        seen_lately = age is not None and float(age) < ttl_s
        if seen_lately and other_pid and (other_host != host or pid_alive(int(other_pid))) \
                and int(other_pid) != os.getpid():
            raise SettingsError(f"setting 'machine': {name!r} is already running (pid "
                                f"{other_pid} on {other_host})")
        await self._rows("UPDATE ma_machines SET url = %s, host = %s, pid = %s, instance = %s, "
                         "started_at = now(), seen_at = now(), draining = false WHERE name = %s",
                         (url, host, os.getpid(), instance, name))

    async def set_draining(self, name: str, draining: bool = True) -> bool:
        rows = await self._rows("UPDATE ma_machines SET draining = %s WHERE name = %s "
                                "RETURNING name", (draining, name))
        return bool(rows)

    async def machines(self) -> list[MachineRow]:
        rows = await self._rows(
            "SELECT name, url, host, pid, extract(epoch FROM now() - seen_at), draining "
            "FROM ma_machines ORDER BY name")
        return [MachineRow(n, u, h, p, None if a is None else float(a), d)
                for n, u, h, p, a, d in rows]

    # ---- leases (CL-9) ---------------------------------------------------------------------

    async def take(self, slot: int, machine: str, ttl_s: float) -> int | None:
        """Take the slot when nobody holds it, its lease expired, or it is this machine's from an
        earlier process of it: the new epoch, or None when another machine holds it."""
        rows = await self._rows(
            "UPDATE ma_slot_leases SET holder = %s, epoch = epoch + 1, "
            "expires_at = now() + make_interval(secs => %s), taken_at = now(), "
            "renewed_at = now() "
            "WHERE slot = %s AND (holder IS NULL OR expires_at <= now() OR holder = %s) "
            "RETURNING epoch", (machine, ttl_s, slot, machine))
        return int(rows[0][0]) if rows else None

    async def renew(self, machine: str, held: Sequence[tuple[int, int]], ttl_s: float,
                    ) -> set[int]:
        """Extend the leases ``held`` ((slot, epoch) pairs) this machine still holds at those
        epochs, and say the machine is alive: the slots renewed (the others are lost)."""
        slots = [s for s, _ in held]
        epochs = [e for _, e in held]
        rows = await self._rows(
            "WITH seen AS (UPDATE ma_machines SET seen_at = now() WHERE name = %s) "
            "UPDATE ma_slot_leases AS l SET expires_at = now() + make_interval(secs => %s), "
            "renewed_at = now() FROM unnest(%s::integer[], %s::bigint[]) AS h(slot, epoch) "
            "WHERE l.slot = h.slot AND l.epoch = h.epoch AND l.holder = %s RETURNING l.slot",
            (machine, ttl_s, slots, epochs, machine))
        return {int(r[0]) for r in rows}

    async def leave(self, slot: int, machine: str, epoch: int) -> bool:
        """Give the slot up at once (drained), so another machine may take it now."""
        rows = await self._rows(
            "UPDATE ma_slot_leases SET holder = NULL, expires_at = '-infinity' "
            "WHERE slot = %s AND holder = %s AND epoch = %s RETURNING slot",
            (slot, machine, epoch))
        return bool(rows)

    async def slot_map(self) -> list[SlotRow]:
        """Every slot: its home, holder, epoch, whether its lease is live, the holder's URL."""
        rows = await self._rows(
            "SELECT l.slot, l.home, l.holder, l.epoch, l.expires_at > now(), m.url, "
            "extract(epoch FROM now() - l.renewed_at) FROM ma_slot_leases l "
            "LEFT JOIN ma_machines m ON m.name = l.holder ORDER BY l.slot")
        return [SlotRow(s, h, who, int(e), bool(live), url or None,
                        None if age is None else float(age))
                for s, h, who, e, live, url, age in rows]

    async def machine_states(self, ttl_s: float) -> dict[str, tuple[bool, bool]]:
        """Each machine: (alive by the database's clock within ``ttl_s``, draining)."""
        rows = await self._rows(
            "SELECT name, seen_at > now() - make_interval(secs => %s), draining "
            "FROM ma_machines", (ttl_s,))
        return {n: (bool(a), bool(d)) for n, a, d in rows}


def check_cluster(row: ClusterRow, slots: int | None, id_fingerprint: str) -> None:
    """Refuse a machine (or a second ``create``) that disagrees with the cluster (CL-8)."""
    if slots is not None and row.slots != slots:
        raise SettingsError(f"setting 'slots' is {slots} but the cluster was created with "
                            f"{row.slots} slots (fixed at creation)")
    if row.id_fingerprint != id_fingerprint:
        raise SettingsError("setting 'id_secret' differs from the cluster's (its fingerprint "
                            f"{id_fingerprint} is not the recorded {row.id_fingerprint}): every "
                            "machine needs the id secret the cluster was created with")

