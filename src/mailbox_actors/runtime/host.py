"""The actor host: activation, delivery, idle eviction and shutdown for one node (RT-2..RT-4, RT-8..RT-11).

It owns the table of live activations (bounded, least recently used evicted first), admits each
request or alarm run through the actor's gate and queue bound, applies owner and deadline checks, and
holds the output gate (implicit writes commit before a reply leaves). It never parses the wire
format (that is the router's job) and never decides when alarms fire (that is the scheduler's).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import structlog

from mailbox_actors.core.actor_ids import check_id, id_from_name
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.rng import Rng
from mailbox_actors.platform.services import Services
from mailbox_actors.platform.sqlite_files import is_disk_full
from mailbox_actors.platform.storage.opening import open_storage
from mailbox_actors.platform.storage.sql import StorageCorrupt, implicit_writes
from mailbox_actors.platform.storage.types import StorageWriteFailed
from mailbox_actors.runtime.actor import Actor, ActorContext, AlarmInfo, Call, current_deadline
from mailbox_actors.runtime.migrations import apply_migrations, check_migrations
from mailbox_actors.runtime.outbox import EventSink, RecordingEventSink
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.errors import DeadlineExceeded, ErrorCode, MailboxActorsError

__all__ = ["ActorHost", "AlarmOutcome", "MetricsSink"]

Key = tuple[str, str]
# (what happened, the alarm now stored): "done" | "failed" | "later" | "gone" | "busy", or
# "unavailable" (the actor's file cannot be opened now) | "unknown" (no such namespace here)
AlarmOutcome = tuple[str, int | None]
_ABANDONED_PURPOSE_RETRY_MS = 64_000  # a purpose whose runs were abandoned is tried again then

_META_SQL = "SELECT k, v FROM _ma_meta WHERE k IN ('schema_version', 'owner_tenant', " \
            "'owner_identity', 'erased')"


class MetricsSink(Protocol):
    def inc(self, name: str, labels: tuple[tuple[str, str], ...] = (), value: float = 1) -> None:
        ...


class AlarmSinkFactory(Protocol):
    def sink(self, key: Key) -> Any: ...


class ActorHost:
    """Live activations of one node, and the only way a request or alarm reaches an actor."""

    def __init__(self, settings: RuntimeSettings, *, clock: Clock, rng: Rng, ids: Ids,
                 metrics: MetricsSink, namespace_keys: dict[str, bytes],
                 services: Services | None = None) -> None:
        self.settings = settings
        self.services = services or Services()
        self.clock = clock
        self.rng = rng
        self.ids = ids
        self.metrics = metrics
        self.log = structlog.get_logger("mailbox_actors.runtime")
        self.actors_dir = settings.path / "actors"
        self._classes: dict[str, type[Actor]] = {}
        self._keys = namespace_keys
        self._active: OrderedDict[Key, ActorContext] = OrderedDict()
        self.alarm_sinks: AlarmSinkFactory | None = None
        self.call_actor: Callable[..., Awaitable[Any]] = _no_router
        self.event_sink: EventSink = RecordingEventSink()
        # tenant id -> its events_days from the control database (None: unknown, use the default)
        self.events_days: Callable[[str], Awaitable[int | None]] = _unknown_events_days
        self._inflight = 0
        # Made only by stop(), when it waits for work in flight: not an Event per busy period.
        self._drained: anyio.Event | None = None
        self.stopping = False
        self._deadline_wakes: list[tuple[int, anyio.Event]] = []  # FakeClock only
        self.activations = 0
        self.evictions = 0

    # ---- registration and placement --------------------------------------------------------

    def register(self, cls: type[Actor]) -> None:
        check_migrations(cls.migrations, cls.__name__)
        self._classes[cls.namespace] = cls

    def id_from_name(self, namespace: str, name: str) -> str:
        """The object id ``name`` has in ``namespace`` on this cluster (for actor-to-actor calls)."""
        key = self._keys.get(namespace)
        if key is None:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST, "unknown namespace",
                                     details={"namespace": namespace[:64]})
        return id_from_name(key, name)

    def actor_class(self, namespace: str) -> type[Actor] | None:
        return self._classes.get(namespace)

    def path_for(self, namespace: str, object_id: str) -> Path:
        # Only ids that passed check_id reach here, so no path is built from an unchecked string.
        reason = check_id(self._keys[namespace], object_id)
        if reason is not None:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST, reason)
        return self.actors_dir / namespace / object_id[:2] / f"{object_id}.sqlite"

    @property
    def active_count(self) -> int:
        return len(self._active)

    def is_active(self, namespace: str, object_id: str) -> bool:
        return (namespace, object_id) in self._active

    def active_keys(self) -> list[Key]:
        return list(self._active)

    # ---- activation ------------------------------------------------------------------------

    def activate(self, cls: type[Actor], object_id: str, *, create: bool) -> ActorContext | None:
        """Return the live activation, opening the file when needed (None: no such object)."""
        key = (cls.namespace, object_id)
        ctx = self._active.get(key)
        if ctx is not None:
            return ctx
        path = self.path_for(cls.namespace, object_id)
        try:
            storage = open_storage(path, create=create, durability=self.settings.durability,
                                   limits=self.settings.limits, now_ms=self.clock.now_ms)
            if storage is None:
                return None
            try:
                meta = dict(storage.sys_exec(_META_SQL).fetchall())
                ctx = ActorContext(self, cls, object_id, storage, meta)
                ctx.schema_version = apply_migrations(storage, cls.migrations, ctx.schema_version)
                if self.alarm_sinks is not None:
                    storage.alarm_sink = self.alarm_sinks.sink(key)
                ctx.actor = cls(ctx)
            except BaseException:
                storage.close()
                raise
        except MailboxActorsError as e:
            # REL-4: a corrupt or too-new file fails this actor alone.
            self.log.error("actor_activation_failed", namespace=cls.namespace, object_id=object_id,
                           code=e.code.value, reason=e.message, details=e.details)
            raise
        except Exception as e:
            self.log.error("actor_activation_failed", namespace=cls.namespace, object_id=object_id,
                           error=type(e).__name__)
            if is_disk_full(e):  # OPS-3: a migration the full disk refused; retry when there's room
                raise StorageWriteFailed(type(e).__name__) from e
            raise StorageCorrupt(type(e).__name__) from e
        ctx.last_used_ms = self.clock.now_ms()
        self._active[key] = ctx
        self.activations += 1
        if len(self._active) > self.settings.max_active_actors:
            self._enforce_bound(keep=ctx)  # never the activation we are about to use
        return ctx

    # ---- requests --------------------------------------------------------------------------

    async def deliver(self, cls: type[Actor], object_id: str, call: Call, req: Any) -> Any:
        """Run one request on its actor: queue bound, gate, deadline, owner, handler, output gate."""
        if self.stopping:
            raise MailboxActorsError(ErrorCode.UNAVAILABLE, "the node is shutting down")
        is_init = type(req) is cls.init_request
        ctx = self._active.get((cls.namespace, object_id))
        if ctx is None:
            ctx = self.activate(cls, object_id, create=is_init)
            if ctx is None:
                raise MailboxActorsError(cls.not_found,
                                         f"no {cls.namespace} object has been initialised here")
        ctx.admit()
        self._enter()
        try:
            if ctx.gate_closed:
                await ctx.wait_gate(call.deadline_ms)
            if self.clock.now_ms() > call.deadline_ms:
                raise DeadlineExceeded()
            ctx.check_owner(call, is_init)
            token = current_deadline.set(call.deadline_ms)
            writes: list[int] = []
            writes_token = implicit_writes.set(writes)
            try:
                result = await ctx.actor.handle(call, req)
            finally:
                current_deadline.reset(token)
                implicit_writes.reset(writes_token)
                if not ctx.closed:
                    ctx.storage.flush()  # the output gate: nothing leaves before its writes commit
            ctx.storage.check_writes(writes)  # ...and never as a success if they were not stored
            return result
        finally:
            self._release(ctx)

    def _enter(self) -> None:
        self._inflight += 1

    def _release(self, ctx: ActorContext) -> None:
        ctx.pending -= 1
        ctx.last_used_ms = self.clock.now_ms()
        if not ctx.closed:
            self._active.move_to_end(ctx.key)
        self._inflight -= 1
        if self._inflight == 0 and self._drained is not None:
            self._drained.set()
        if len(self._active) > self.settings.max_active_actors:
            self._enforce_bound()

    # ---- alarms ----------------------------------------------------------------------------

    async def fire_alarm(self, key: Key, retry_count: int, force: bool = False) -> AlarmOutcome:
        """Run an actor's alarm handler if its stored alarm is due, or at once when ``force``
        (AL-3, AL-4)."""
        cls = self._classes.get(key[0])
        if cls is None or self.stopping:
            return ("unknown", None) if cls is None else ("busy", None)
        try:
            ctx = self.activate(cls, key[1], create=False)
        except MailboxActorsError:
            return ("unavailable", None)
        if ctx is None:
            return ("gone", None)
        sql = ctx.storage
        stored = sql.stored_alarm()
        if stored is None:
            return ("gone", None)
        if stored > self.clock.now_ms() and not force:
            return ("later", stored)
        if ctx.alarm_running:
            return ("busy", stored)
        ctx.alarm_running = True
        ctx.pending += 1
        self._enter()
        ok = False
        try:
            if ctx.gate_closed:
                await ctx.wait_gate(None)
            sql.alarm_hidden = True
            sql.alarm_set_in_handler = False
            writes: list[int] = []
            writes_token = implicit_writes.set(writes)
            with structlog.contextvars.bound_contextvars(request_id=self.ids.new_id("req")):
                try:
                    await ctx.actor.alarm(AlarmInfo(retry_count, retry_count > 0, stored))
                    ok = True
                except Exception as e:
                    self.log.warning("alarm_handler_failed", namespace=key[0], object_id=key[1],
                                     retry_count=retry_count, error=type(e).__name__,
                                     reason=str(e)[:200])
                finally:
                    sql.alarm_hidden = False
                    implicit_writes.reset(writes_token)
            if ctx.closed:
                return ("failed", None)
            sql.flush()
            try:
                sql.check_writes(writes)
            except MailboxActorsError:
                # SQLite rolled back what the handler wrote (and any alarm it set): a failed run,
                # retried with backoff, not a success that loses its writes.
                self.log.warning("alarm_handler_writes_rolled_back", namespace=key[0],
                                 object_id=key[1], retry_count=retry_count)
                ok = False
            if ok and not sql.alarm_set_in_handler and sql.stored_alarm() == stored:
                sql.delete_alarm()
                sql.flush()
            return ("done" if ok else "failed", sql.stored_alarm())
        finally:
            ctx.alarm_running = False
            self._release(ctx)

    def abandon_alarm(self, key: Key, fired_ms: int | None) -> int | None:
        """After the last retry: clear the alarm unless something set a new one meanwhile, or
        purposes are still pending (then it is re-armed). Returns the alarm stored after it."""
        cls = self._classes.get(key[0])
        if cls is None:
            return None
        ctx = self.activate(cls, key[1], create=False)
        if ctx is not None and (fired_ms is None or ctx.storage.stored_alarm() == fired_ms):
            pending = ctx.scheduled()
            if pending:
                # Purposes are still recorded (the outbox, maintenance): the actor's only alarm
                # must stay, or nothing would ever run them again. Give up on this run only.
                ctx.storage.set_alarm(max(min(pending.values()),
                                          self.clock.now_ms() + _ABANDONED_PURPOSE_RETRY_MS))
            else:
                ctx.storage.delete_alarm()
            ctx.storage.flush()
        return None if ctx is None else ctx.storage.stored_alarm()

    # ---- eviction (RT-9) -------------------------------------------------------------------

    @staticmethod
    def _idle(ctx: ActorContext) -> bool:
        return ctx.pending == 0 and not ctx.alarm_running and not ctx.gate_closed

    def evict(self, ctx: ActorContext) -> None:
        """Close the actor's file and drop it from memory; its alarm stays with the scheduler."""
        if ctx.closed:
            return
        ctx.closed = True
        self._active.pop(ctx.key, None)
        self.evictions += 1
        try:
            ctx.storage.close()
        except Exception as e:  # a close failure must not take the node down
            self.log.error("actor_close_failed", namespace=ctx.namespace, object_id=ctx.id,
                           error=type(e).__name__)

    def reset(self, ctx: ActorContext) -> None:
        """``block_concurrency_while`` failed: drop the in-memory actor, keep its storage."""
        self.log.warning("actor_reset", namespace=ctx.namespace, object_id=ctx.id)
        self.evict(ctx)
        ctx._open_gate()

    def _enforce_bound(self, keep: ActorContext | None = None) -> None:
        excess = len(self._active) - self.settings.max_active_actors
        if excess <= 0:
            return
        victims = []
        for ctx in self._active.values():  # least recently used first; stop once enough
            if ctx is not keep and self._idle(ctx):
                victims.append(ctx)
                if len(victims) >= excess:
                    break
        for ctx in victims:
            self.evict(ctx)

    def evict_idle(self, now_ms: int) -> int:
        """Evict every actor idle for ``idle_ms`` or more; returns how many."""
        cutoff = now_ms - self.settings.idle_ms
        victims = []
        for ctx in self._active.values():
            if ctx.last_used_ms > cutoff:
                break  # ordered by last use: the rest are younger
            if self._idle(ctx):
                victims.append(ctx)
        for ctx in victims:
            self.evict(ctx)
        return len(victims)

    def wake_at_deadline(self, deadline_ms: int, ev: anyio.Event) -> None:
        """FakeClock: wake a queued request once time passes its deadline."""
        self._deadline_wakes.append((deadline_ms, ev))

    def next_due_ms(self) -> int | None:
        due = [d + 1 for d, ev in self._deadline_wakes if not ev.is_set()]
        for ctx in self._active.values():
            if self._idle(ctx):
                due.append(ctx.last_used_ms + self.settings.idle_ms)
                break
        return min(due, default=None)

    async def run_due(self, now_ms: int) -> None:
        if self._deadline_wakes:
            keep = []
            for d, ev in self._deadline_wakes:
                if d < now_ms:
                    ev.set()
                elif not ev.is_set():
                    keep.append((d, ev))
            self._deadline_wakes = keep
            await anyio.lowlevel.checkpoint()  # let the woken requests answer
        self.evict_idle(now_ms)

    # ---- shutdown (RT-11) ------------------------------------------------------------------

    async def stop(self, grace_ms: int | None = None) -> None:
        """Refuse new work, let work in flight finish (up to the grace period), close every file."""
        self.stopping = True
        grace = self.settings.shutdown_grace_ms if grace_ms is None else grace_ms
        if self._inflight:
            self._drained = anyio.Event()
            with anyio.move_on_after(grace / 1000):
                await self._drained.wait()
        if self._inflight:
            self.log.warning("shutdown_grace_expired", inflight=self._inflight)
        for ctx in list(self._active.values()):
            self.evict(ctx)

    def scan_alarms(self, progress: Callable[[int], None] | None = None) -> dict[Key, int]:
        """Read the alarm of every actor file on disk (when the node's index is missing)."""
        found: dict[Key, int] = {}
        n = 0
        if not self.actors_dir.exists():
            return found
        for ns_dir in sorted(self.actors_dir.iterdir()):
            cls = self._classes.get(ns_dir.name)
            if cls is None or not ns_dir.is_dir():
                continue
            for shard in sorted(ns_dir.iterdir()):
                for f in sorted(shard.glob("*.sqlite")):
                    object_id = f.name[: -len(".sqlite")]
                    if check_id(self._keys[cls.namespace], object_id) is not None:
                        continue
                    n += 1
                    if progress is not None and n % 1000 == 0:
                        progress(n)
                    try:
                        storage = open_storage(f, create=False, durability=self.settings.durability,
                                               limits=self.settings.limits, now_ms=self.clock.now_ms)
                    except MailboxActorsError:
                        self.log.error("alarm_scan_unreadable", namespace=cls.namespace,
                                       object_id=object_id)
                        continue
                    if storage is None:
                        continue
                    at = storage.stored_alarm()
                    storage.close()
                    if at is not None:
                        found[(cls.namespace, object_id)] = at
        return found


async def _unknown_events_days(_tenant_id: str) -> int | None:
    return None


async def _no_router(*_args: Any, **_kwargs: Any) -> Any:
    raise MailboxActorsError(ErrorCode.UNAVAILABLE, "no router is attached to this host")
