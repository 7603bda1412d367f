"""One machine of a cluster on many machines (CL-6, CL-10, CL-12..CL-14, CL-17).

A machine is a *front* node (the machine's own directory ``VOLUMES/machines/<name>``: its control
database and queues, webhook consumers, ids, health) and one node per slot it holds, each over the
slot's volume ``VOLUMES/slot-<k>`` (its actors' files and alarm index; the node's data-directory
lock is the volume lock). Every ``renew_s`` the machine renews its leases in one statement, drains
the slots it lost, closes those whose deadline passed long ago (the volume is released; the lease
is kept, and reopened when the same epoch is renewed), hands back under ``shared`` the slots whose
home machine is back, and takes the slots it should hold: its home slots, and under ``shared``
those of dead or draining machines. Taking a slot starts its node, which loads the slot's alarm
index and fires the overdue alarms at once (CL-14).

A slot node serves only while its lease serves: the machine's HTTP app answers ``unavailable``
naming slot and epoch before any file is opened, and the slot's ``EpochFence`` refuses every
commit after the deadline and every commit once a newer epoch stamped the file (CL-11).

The machine never copies an actor file: under ``local`` a dead machine's slots wait for it; under
``shared`` another machine attaches the same volume (``VOLUMES`` is storage every machine sees).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec

from mailbox_actors.cluster.lease_table import (
    LeaseTable,
    SlotRow,
    TableUnreachable,
    check_cluster,
)
from mailbox_actors.cluster.leases import LeaseKeeper, SlotLease, handed_back, wanted_slots
from mailbox_actors.cluster.slots import secret_fingerprint, slot_dir, slot_of
from mailbox_actors.http.client import HttpPool
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.forwarding import FORWARD_MAX_S, FORWARDED_HEADER
from mailbox_actors.node.node import Node
from mailbox_actors.platform.locks import DataDirLocked
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.services import Services
from mailbox_actors.platform.storage.fence import SLOT_FENCE, EpochFence
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.settings import RuntimeSettings, SettingsError
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["FENCE_OFF_ENV", "Machine", "MachineSettings", "SlotHost"]

# Test-only: "1" turns the fence off (no epoch in the files, no lease deadline, no volume lock,
# and a lost lease is not stepped down from) so a fault test can show that without it the history
# breaks. Never set it in production.
FENCE_OFF_ENV = "MAILBOX_ACTORS_TEST_FENCE_OFF"
_ENC = msgspec.json.Encoder()


class _Deadline(msgspec.Struct):
    deadline_ms: int | None = None


_DEADLINE = msgspec.json.Decoder(_Deadline)


@dataclass(frozen=True, slots=True)
class MachineSettings:
    name: str
    volumes: Path
    url: str  # where the other machines and clients reach this one
    ttl_s: float = 10.0
    renew_s: float = 3.0
    slots: int | None = None  # when given, must be the cluster's (exit 2 otherwise)
    fence: bool = True


class SlotHost:
    """A held slot: its lease, and its node and app while the volume is open."""

    __slots__ = ("app", "closing", "done", "lease", "node", "opening", "slot", "stop")

    def __init__(self, slot: int, lease: SlotLease) -> None:
        self.slot = slot
        self.lease = lease
        self.node: Node | None = None
        self.app: NodeApp | None = None
        self.closing = False
        self.opening = False
        self.stop: anyio.Event | None = None  # set: the slot's task stops its node
        self.done: anyio.Event | None = None


class _AlwaysServing:
    """The lease view with the fence off (test-only)."""

    def __init__(self, lease: SlotLease) -> None:
        self.slot, self.epoch = lease.slot, lease.epoch

    def serving(self) -> bool:
        return True


class SlotPlacement:
    """Where a call from an actor of slot ``slot`` goes (``Router``'s placement): its own slot
    in process; any other slot through the machine (in process when held here, else one hop)."""

    def __init__(self, machine: Machine, slot: int) -> None:
        self.machine = machine
        self.slot = slot
        self.slots = machine.slot_count

    def elsewhere(self, namespace: str, object_id: str) -> int | None:
        target = slot_of(self.slots, namespace, object_id)
        return None if target == self.slot else target

    async def send(self, owner: int, namespace: str, object_id: str, body: bytes) -> bytes:
        return await self.machine.call_slot(owner, namespace, object_id, body)


def _err(code: ErrorCode, message: str, details: dict[str, Any] | None = None) -> bytes:
    return _ENC.encode({"err": MailboxActorsError(code, message, details=details).to_body()})


class Machine:
    """Use ``async with Machine(...)``; ``run()`` keeps the leases until cancelled."""

    def __init__(self, settings: MachineSettings, base: RuntimeSettings, table: LeaseTable, *,
                 cluster_token: str, operator_token: str,
                 objects: Sequence[type[Actor[Any]]] | None = None,
                 services: Services | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 openapi: bytes | Callable[[], bytes] = b"{}") -> None:
        self.settings = settings
        self.base = base
        self.table = table
        self.cluster_token = cluster_token
        self.operator_token = operator_token
        self.objects = objects
        self.services = services or Services()
        self.keeper = LeaseKeeper(table, settings.name, ttl_s=settings.ttl_s,
                                  renew_s=settings.renew_s, monotonic=monotonic)
        self.log = get_logger("mailbox_actors.machine")
        self.instance = uuid.uuid4().hex
        self.slot_count = 0
        self.policy = "local"
        self.hosts: dict[int, SlotHost] = {}
        self.map: list[SlotRow] = []
        self.map_version = 0
        self.draining = False
        front_dir = settings.volumes / "machines" / settings.name
        self.front = Node(msgspec.structs.replace(
            base, data_dir=str(front_dir), node_name=settings.name,
            control_db=base.control_db or str(settings.volumes / "control.sqlite"),
            queues_db=base.queues_db or str(settings.volumes / "queues.sqlite")),
            objects=objects, services=self.services)
        self.front_app = NodeApp(self.front, cluster_token=cluster_token,
                                 operator_token=operator_token, openapi=openapi)
        self.pool = HttpPool()
        self._tg: anyio.abc.TaskGroup | None = None
        self.takeovers = 0
        self._slot_actors = base.max_active_actors  # per slot node, set at start
        self._settle_at = 0.0  # takeovers of other machines' slots wait until then
        self._outage = False  # the last renewal failed
        self._alive_since: dict[str, float] = {}  # machine -> when this one saw it alive

    # ---- lifetime --------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the cluster (exit-2 errors are SettingsError), register, open the front node,
        take the slots this machine should hold."""
        try:
            await self.table.migrate()
            row = await self.table.cluster()
        except TableUnreachable as e:
            raise SettingsError(f"setting 'postgres': cannot reach PostgreSQL ({e})") from None
        if row is None:
            raise SettingsError("setting 'postgres': the database holds no cluster; create it "
                                "once with 'mailbox-actors slots create'")
        check_cluster(row, self.settings.slots, secret_fingerprint(self.base.id_secret))
        self.slot_count, self.policy = row.slots, row.slot_failover
        # The machine's ceiling of open actors (and with it its descriptors, OPS-4) shared by
        # the slots it usually holds: each slot node gets its part, not the whole.
        try:
            machines = len(await self.table.machines()) or 1
        except TableUnreachable as e:
            raise SettingsError(f"setting 'postgres': cannot reach PostgreSQL ({e})") from None
        usual = -(-self.slot_count // machines)
        self._slot_actors = max(64, self.base.max_active_actors // usual)
        await self.table.register(self.settings.name, self.settings.url, self.instance,
                                  self.settings.ttl_s)
        try:
            await self.front.start()  # the lock of VOLUMES/machines/<name>: one process a name
        except DataDirLocked as e:
            raise SettingsError(f"setting 'volumes': {e}") from None
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._settle_at = self.keeper.monotonic() + self.settings.ttl_s
        await self.tick()

    async def __aenter__(self) -> Machine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run(self) -> None:
        """Renew, take and hand back every ``renew_s`` until cancelled (``start`` ran the
        first period's)."""
        await anyio.sleep(self.settings.renew_s)
        while True:
            began = self.keeper.monotonic()
            await self.tick()
            # A renewal period from the start of the last one, however long it took.
            await anyio.sleep(max(0.0, began + self.settings.renew_s - self.keeper.monotonic()))

    async def stop(self) -> None:
        """Drain every slot (within TTL/2), leave its lease, stop the front node. The task
        groups entered by ``start`` are left in reverse order, with no other scope around them
        (a cancel scope must be the innermost when it is left)."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for host in list(self.hosts.values()):
                    tg.start_soon(self._close, host, True)
        try:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
                await self._tg.__aexit__(None, None, None)
                self._tg = None
            await self.front.stop()
        finally:
            with anyio.CancelScope(shield=True):
                await self.pool.aclose()
                await self.table.close()

    # ---- the leases (CL-9, CL-10, CL-13, CL-17) ---------------------------------------------

    async def tick(self) -> None:
        """One renewal period's work."""
        try:
            lost = await self.keeper.renew()
        except TableUnreachable as e:
            self.log.warning("lease_renewal_failed", machine=self.settings.name, error=str(e))
            lost, reachable = set(), False
            self._outage = True
        else:
            reachable = True
            if self._outage:
                # Back from an outage (CL-17): every other machine may still be about to renew
                # its own expired leases at their epochs; take none of theirs for one TTL.
                self._outage = False
                self._settle_at = self.keeper.monotonic() + self.settings.ttl_s
        if not self.settings.fence:
            lost = set()  # test-only: a machine without the fence never steps down either
        for slot in lost:
            host = self.hosts.get(slot)
            if host is not None:
                self.log.warning("slot_lost", slot=slot, epoch=host.lease.epoch)
                self._spawn(self._close, host, False)
        half = self.settings.ttl_s / 2
        for host in list(self.hosts.values()):
            if host.closing:
                continue
            overdue = host.lease.overdue_s()
            if host.node is not None and overdue > half and self.settings.fence:
                # Unrenewed for TTL/2 past the deadline: release the volume, keep the lease
                # (renewed at the same epoch later, it is opened again).
                self.log.warning("slot_suspended", slot=host.slot, epoch=host.lease.epoch)
                self._spawn(self._suspend, host)
            elif host.node is None and host.stop is None and overdue < 0:
                # Renewed again (CL-17): opened once the suspended node has stopped and let the
                # volume go (``stop`` is None then); opened while it still stops, the new node
                # would find the volume locked and give the lease up, to be taken at a new epoch.
                self._spawn(self._open, host)
        if not reachable:
            return
        try:
            rows = await self.keeper._bounded(self.table.slot_map())
            machines = await self.keeper._bounded(self.table.machine_states(self.settings.ttl_s))
        except TableUnreachable:
            return
        self.map, self.map_version = rows, self.map_version + 1
        now = self.keeper.monotonic()
        for name, (alive, _) in machines.items():
            if not alive:
                self._alive_since.pop(name, None)
            else:
                self._alive_since.setdefault(name, now)
        me = self.settings.name
        self.draining = machines.get(me, (True, False))[1]
        held = set(self.hosts)
        if self.draining:
            for host in list(self.hosts.values()):
                if not host.closing:
                    self._spawn(self._close, host, True)
            return
        # Hand back only to a home machine seen alive for a TTL (not one flapping back).
        steady = {n: st for n, st in machines.items()
                  if now - self._alive_since.get(n, now) >= self.settings.ttl_s}
        for slot in handed_back(me, self.policy, rows, steady, held):
            host = self.hosts[slot]
            if not host.closing:
                self.log.info("slot_handed_back", slot=slot, home=rows[slot].home)
                self._spawn(self._close, host, True)
        # Another machine's slots only after one TTL of this machine's life: at a cluster's
        # start every machine gets the time to take its own before anyone takes them over.
        settled = now >= self._settle_at
        for slot in wanted_slots(me, self.policy, rows, machines, held):
            if rows[slot].home != me and not settled:
                continue
            if self.keeper.monotonic() - now > self.settings.renew_s / 2:
                break  # opening slots must not delay the next renewal: the rest next period
            try:
                lease = await self.keeper.take(slot)
            except TableUnreachable:
                return
            if lease is None:
                continue
            if rows[slot].home != me:
                self.takeovers += 1
            host = self.hosts[slot] = SlotHost(slot, lease)
            self.log.info("slot_taken", slot=slot, epoch=lease.epoch, home=rows[slot].home)
            await self._open(host)

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        assert self._tg is not None
        self._tg.start_soon(fn, *args)

    async def _open(self, host: SlotHost) -> None:
        """Start the slot's node on its volume (its lock; its alarm index, overdue alarms fire
        now), in a task of its own that also stops it (a node starts and stops in one task).
        A volume another process holds: the lease is left, to be taken again later."""
        if host.node is not None or host.stop is not None or host.closing or host.opening:
            return  # serving, or its node still stopping (the next period opens it)
        host.opening = True
        try:
            assert self._tg is not None
            await self._tg.start(self._slot_life, host)
        finally:
            host.opening = False

    async def _slot_life(self, host: SlotHost, *,
                         task_status: anyio.abc.TaskStatus[bool] = anyio.TASK_STATUS_IGNORED,
                         ) -> None:
        lease = host.lease
        fence = EpochFence(lease) if self.settings.fence else EpochFence(
            _AlwaysServing(lease), checks=False)
        services = Services({**dict(self.services.items()), SLOT_FENCE: fence})
        data = slot_dir(self.settings.volumes, host.slot)
        node = Node(msgspec.structs.replace(self.base, data_dir=str(data),
                                            node_name=f"{self.settings.name}/slot-{host.slot}",
                                            control_db=None, queues_db=None,
                                            max_active_actors=self._slot_actors),
                    objects=self.objects, services=services,
                    placement=SlotPlacement(self, host.slot),
                    shared_control=(self.front.control_db, self.front.queues))
        if not self.settings.fence:
            data.mkdir(mode=0o700, parents=True, exist_ok=True)  # what the lock's acquire does
            node._lock.acquire = lambda: None  # type: ignore[method-assign]  # test-only
            node._lock.release = lambda: None  # type: ignore[method-assign]
        try:
            await node.start()
        except Exception as e:  # the volume held elsewhere (DataDirLocked), a damaged index...
            # ...fails this slot alone, for now: the lease is left and taken again later.
            self.log.warning("slot_volume_locked" if isinstance(e, DataDirLocked)
                             else "slot_open_failed", slot=host.slot, epoch=lease.epoch,
                             reason=str(e) if isinstance(e, DataDirLocked)
                             else type(e).__name__)
            if self.hosts.get(host.slot) is host:
                del self.hosts[host.slot]
            await self.keeper.leave(lease)
            task_status.started(False)
            return
        stop = host.stop = anyio.Event()
        done = host.done = anyio.Event()
        host.node = node
        host.app = NodeApp(node, cluster_token=self.cluster_token,
                           operator_token=self.operator_token)
        self.log.info("slot_serving", slot=host.slot, epoch=lease.epoch,
                      alarms_pending=node.scheduler.pending_count)
        task_status.started(True)
        try:
            await stop.wait()
        finally:
            # Not under a shield of its own: the node's task group, entered by its start in
            # this task, must be the innermost scope when its stop leaves it. The machine stops
            # every slot (``stop``) before it cancels these tasks.
            host.node = host.app = None
            try:
                await node.stop(grace_ms=int(self.settings.ttl_s * 500))
            finally:
                host.stop = None
                done.set()

    async def _stop_node(self, host: SlotHost) -> None:
        """Drain the slot's node within TTL/2 and close it, releasing the volume."""
        stop, done = host.stop, host.done
        if stop is not None and done is not None:
            stop.set()
            await done.wait()

    async def _suspend(self, host: SlotHost) -> None:
        await self._stop_node(host)

    async def _close(self, host: SlotHost, leave: bool) -> None:
        """Drain the slot within TTL/2, close its actors, release its volume; ``leave``: give
        the lease up at once (drain, hand-back, stop) rather than having lost it."""
        if host.closing:
            return
        host.closing = True
        try:
            await self._stop_node(host)
            if leave:
                await self.keeper.leave(host.lease)
            else:
                host.lease.lost = True
        finally:
            if self.hosts.get(host.slot) is host:
                del self.hosts[host.slot]
            self.log.info("slot_released", slot=host.slot, epoch=host.lease.epoch)

    # ---- routing (CL-12) -------------------------------------------------------------------

    def slot_for(self, namespace: str, object_id: str) -> int:
        return slot_of(self.slot_count, namespace, object_id)

    def holder_url(self, slot: int) -> str | None:
        """The URL of the machine the map says serves ``slot`` (None: nobody now)."""
        if slot >= len(self.map):
            return None
        row = self.map[slot]
        if row.holder is None or not row.live or row.holder == self.settings.name:
            return None
        return row.url

    def unavailable(self, slot: int, why: str) -> bytes:
        host = self.hosts.get(slot)
        epoch = host.lease.epoch if host is not None else (
            self.map[slot].epoch if slot < len(self.map) else 0)
        return _err(ErrorCode.UNAVAILABLE, f"slot {slot} {why}",
                    {"slot": slot, "epoch": epoch})

    def serving_host(self, slot: int) -> SlotHost | None:
        host = self.hosts.get(slot)
        if host is None or host.node is None or host.closing or host.stop is None \
                or host.stop.is_set():
            return None
        if self.settings.fence and not host.lease.serving():
            return None
        return host

    async def call_slot(self, slot: int, namespace: str, object_id: str, body: bytes) -> bytes:
        """An envelope for an id of ``slot``, from an actor of this machine (RPC-9)."""
        host = self.serving_host(slot)
        if host is not None:
            assert host.node is not None
            return await host.node.router.call_bytes(namespace, object_id, body)
        if slot in self.hosts:
            return self.unavailable(slot, "is not served here now (lease expired or draining)")
        url = self.holder_url(slot)
        if url is None:
            return self.unavailable(slot, "has no holder now")
        status, out = await self.forward(url, "POST", f"/rpc/{namespace}/{object_id}",
                                         {"authorization": f"Bearer {self.cluster_token}"},
                                         body, slot)
        return out if status == 200 else self.unavailable(
            slot, f"holder answered HTTP {status}")

    async def forward(self, url: str, method: str, path: str, headers: dict[str, str],
                      body: bytes, slot: int) -> tuple[int, bytes]:
        """One hop to the slot's holder, marked forwarded, bounded by the envelope's deadline."""
        try:
            deadline = _DEADLINE.decode(body).deadline_ms if body else None
        except msgspec.DecodeError:
            deadline = None
        timeout = FORWARD_MAX_S if deadline is None else min(
            FORWARD_MAX_S, (deadline - self.front.clock.now_ms()) / 1000)
        if timeout <= 0:
            return 200, _err(ErrorCode.TIMEOUT, "the request's deadline passed before it "
                             "reached its machine")
        fwd = {**headers, FORWARDED_HEADER: "1", "content-type": "application/json"}
        try:
            return await self.pool.request(url, method, path, fwd, body, timeout_s=timeout)
        except Exception as e:
            self.log.warning("forward_failed", slot=slot, error=type(e).__name__)
            return 200, self.unavailable(slot, "holder cannot be reached now")

    def cluster_doc(self) -> dict[str, Any]:
        """``GET /cluster``: what a client routes by (CL-12); never database credentials."""
        machines: dict[str, str] = {}
        for row in self.map:
            if row.holder is not None and row.url:
                machines[row.holder] = row.url
        return {
            "slots": self.slot_count,
            "slot_failover": self.policy,
            "machine": self.settings.name,
            "version": self.map_version,
            "machines": machines,
            "map": [{"slot": r.slot, "holder": r.holder if r.live else None, "epoch": r.epoch,
                     "url": r.url if r.live else None} for r in self.map],
        }

    def status(self) -> dict[str, Any]:
        return {
            "machine": self.settings.name,
            "pid": os.getpid(),
            "slot_failover": self.policy,
            "draining": self.draining,
            "takeovers": self.takeovers,
            "slots": {str(s): {"epoch": h.lease.epoch, "serving": self.serving_host(s) is not None,
                               "deadline_in_s": round(-h.lease.overdue_s(), 3),
                               "actors_active": 0 if h.node is None else h.node.host.active_count,
                               "alarms_pending": 0 if h.node is None
                               else h.node.scheduler.pending_count}
                      for s, h in sorted(self.hosts.items())},
        }
