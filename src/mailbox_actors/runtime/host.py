"""The actor host: activation, delivery, idle eviction and shutdown for one node (RT-2..RT-4, RT-8..RT-11).

It owns the table of live activations (bounded, least recently used evicted first), admits each
request or alarm run through the actor's queue bound and input gate, enters the request's scope,
applies owner and deadline checks, and holds the output gate (implicit writes commit before a reply
leaves). It never parses the wire format (that is the router's job) and never decides when alarms
fire (that is the scheduler's); it opens and admits an alarm's wake (below), whose run is ``alarm_runs``'.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread

from mailbox_actors.alarms.outcome import AlarmOutcome, AlarmResult
from mailbox_actors.core.actor_ids import has_id_form, id_from_name
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.memory import give_back
from mailbox_actors.platform.rng import Rng
from mailbox_actors.platform.services import Services
from mailbox_actors.platform.sqlite_files import is_disk_full
from mailbox_actors.platform.storage import wal_index
from mailbox_actors.platform.storage.errors import StorageCorrupt, StorageWriteFailed
from mailbox_actors.platform.storage.fence import StaleEpoch
from mailbox_actors.platform.storage.hooks import AlarmSink
from mailbox_actors.platform.storage.opening import Connected, Connecting, OpenedAhead, connect_file
from mailbox_actors.runtime import alarm_runs
from mailbox_actors.runtime.activation import META_KEYS, Activation, Key, Opener
from mailbox_actors.runtime.actor import Actor, Call
from mailbox_actors.runtime.classes import ActorClasses, DeferredActor
from mailbox_actors.runtime.context import ActorEnv, CallActor
from mailbox_actors.runtime.eviction import bound_victims, due_soon, idle_victims
from mailbox_actors.runtime.file_threads import FileThreads
from mailbox_actors.runtime.migrations import check_migrations
from mailbox_actors.runtime.outbox import EventsDays, EventSink
from mailbox_actors.runtime.paths import ActorPaths
from mailbox_actors.runtime.scan import scan_alarms
from mailbox_actors.runtime.scope import RequestScope, ScopeHooks
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.runtime.watchdog import LoopWatch
from mailbox_actors.wire.errors import DeadlineExceeded, ErrorCode, MailboxActorsError, Overloaded

__all__ = ["ActorHost", "AlarmSinks", "MetricsSink"]

_TRIM_AFTER_EVICTIONS = 256  # evictions between two ``memory.give_back`` (too slow for each)


class MetricsSink(Protocol):
    def inc(self, name: str, labels: tuple[tuple[str, str], ...] = (), value: float = 1) -> None:
        ...


class AlarmSinks(Protocol):
    """Where each actor's alarm changes go (the node's ``AlarmBook``)."""

    def sink(self, key: Key) -> AlarmSink: ...


class ActorHost:
    """Live activations of one node, and the only way a request or alarm reaches an actor (alarm
    runs through ``AlarmHost``: the scheduler's runner)."""

    def __init__(self, settings: RuntimeSettings, *, clock: Clock, rng: Rng, ids: Ids,
                 metrics: MetricsSink,
                 alarm_sinks: AlarmSinks, call: CallActor, event_sink: EventSink,
                 events_days: EventsDays, services: Services | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self.ids = ids
        self.metrics = metrics
        self.log = get_logger("mailbox_actors.runtime")
        self.watch = LoopWatch(settings.loop_block_warn_ms, metrics, self.log)  # RT-17
        self.actors_dir = settings.path / "actors"
        self.event_sink = event_sink  # read at each outbox run (TestRuntime may wrap it)
        self._alarm_sinks = alarm_sinks
        self.services = services or Services()  # what objects read with ctx.service(KEY)
        self._env = ActorEnv(settings=settings, clock=clock, rng=rng, ids=ids,
                             services=self.services, log=self.log, call=call,
                             events_days=events_days)
        self._hooks = ScopeHooks(clock)
        # Deferred classes (the platform's objects) are imported at their first lookup here.
        self._classes = ActorClasses(
            on_load=lambda cls: check_migrations(cls.migrations, cls.__name__))
        self._openers: dict[str, Opener] = {}  # per namespace, for its class (``activation``)
        self.paths = ActorPaths(self.actors_dir)  # the namespaces' keys and checked ids
        self._keys = self.paths.keys
        self._active: OrderedDict[Key, Activation] = OrderedDict()
        self._inflight = 0
        # Made only by stop(), when it waits for work in flight: not an Event per busy period.
        self._drained: anyio.Event | None = None
        self.stopping = False
        self.activations = 0
        self.evictions = 0
        self._evicted_since_trim = 0
        # Evicted actors' files opened ahead of their alarms (AlarmHost), and closed behind.
        self._files = FileThreads(settings.file_threads)
        self._made_ahead: set[Key] = set()  # open actors whose connection a thread made
        # Keys a thread is opening ahead: False once the loop opened or closed that file itself
        # meanwhile, when the connection made ahead may be to a file since deleted (AlarmHost).
        self._opening: dict[Key, bool] = {}

    # ---- registration and placement --------------------------------------------------------

    def register(self, cls: type[Actor[Any]] | DeferredActor, namespace_key: bytes) -> None:
        """Serve ``cls`` (a deferred one is imported at its first use); its ids are checked with
        ``namespace_key`` (the router derives it)."""
        self.paths.add(self._classes.add(cls), namespace_key)

    def id_from_name(self, namespace: str, name: str) -> str:
        """The object id ``name`` has in ``namespace`` on this cluster (for actor-to-actor calls)."""
        key = self._keys.get(namespace)
        if key is None:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST, "unknown namespace",
                                     details={"namespace": namespace[:64]})
        return id_from_name(key, name)

    def actor_class(self, namespace: str) -> type[Actor[Any]] | None:
        return self._classes.get(namespace)

    def path_for(self, namespace: str, object_id: str) -> Path:
        return self.paths.path_for(namespace, object_id)  # an id of the namespace only

    @property
    def active_count(self) -> int:
        return len(self._active)

    def is_active(self, namespace: str, object_id: str) -> bool:
        return (namespace, object_id) in self._active

    def active_keys(self) -> list[Key]:
        return list(self._active)

    # ---- activation ------------------------------------------------------------------------

    def activate(self, cls: type[Actor[Any]], object_id: str, *, create: bool,
                 ahead: OpenedAhead | None = None,
                 path: str | Path | None = None, alarm: bool = True,
                 shed: bool = True, own: bool = False,
                 connected: Connected | None = None) -> Activation | None:
        """Return the live activation, opening the file when needed (None: no such object);
        ``ahead``: the file's connection made ahead (``opening.connect_ahead``), used or closed;
        ``connected``: the open's first step made on the loop (``opening.connect_recovered``), used
        or closed;
        ``alarm``: read the stored alarm at open (False for a request, which rarely needs it);
        ``shed``: False, the caller sheds the open's caches if the actor stays open
        (``Opener.open``); ``own``: the id is an alarm's key, which the node recorded itself
        (its form is checked, not its HMAC: ``ActorPaths.check_own``); ``path``: the file, when
        the caller made its path already (``paths.file_for``'s text, or ``path_for``'s)."""
        key = (cls.namespace, object_id)
        act = self._active.get(key)
        if act is not None:
            # Activated meanwhile (a request): the connection made ahead, or by an open's first
            # step, goes.
            if path is None:
                path = self.paths.file_for(cls.namespace, object_id, own)
            if ahead is not None:
                ahead.close(Path(path))
            if connected is not None:
                connected.close(path)
            return act
        if ahead is None and key in self._opening:
            self._opening[key] = False
        opener = self._openers.get(cls.namespace)
        if opener is None or opener.cls is not cls:
            opener = self._openers[cls.namespace] = Opener(
                cls, self.settings, self.clock, self._hooks, self._env, self.metrics, self.log,
                self._reset)
        file = self.paths.file_for(cls.namespace, object_id, own) if path is None else path
        try:
            act = opener.open(key, file, create, self._alarm_sinks.sink(key), ahead, alarm, shed,
                              connected)
            if act is None:
                return None
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
        act.last_used_ms = self.clock.now_ms()
        self._active[key] = act
        if ahead is not None:
            self._made_ahead.add(key)
        self.activations += 1
        if len(self._active) > self.settings.max_active_actors:
            self._enforce_bound(keep=act)  # never the activation we are about to use
        return act

    # ---- requests --------------------------------------------------------------------------

    async def deliver(self, cls: type[Actor[Any]], object_id: str, call: Call, req: Any) -> Any:
        """Run one request on its actor: queue bound, gate, deadline, owner, handler, output gate."""
        if self.stopping:
            raise MailboxActorsError(ErrorCode.UNAVAILABLE, "the node is shutting down")
        with RequestScope(call.request_id, call.deadline_ms) as scope:  # entered once
            is_init = type(req) is cls.init_request
            act = self._active.get((cls.namespace, object_id))
            if act is None:
                act = self.activate(cls, object_id, create=is_init, alarm=False)
                if act is None:
                    raise MailboxActorsError(
                        cls.not_found, f"no {cls.namespace} object has been initialised here")
            self._admit(act)
            try:
                if act.starting:
                    await act.started()
                if act.gate.closed:
                    await act.gate.wait_open(call.deadline_ms)
                if self.clock.now_ms() > call.deadline_ms:
                    raise DeadlineExceeded()
                act.owner.check(call, is_init, isinstance(req, cls.erased_ops))
                try:
                    result = await self.watch.timed(act.actor.handle(call, req), act.namespace, req)
                finally:
                    if not act.closed:  # the output gate: nothing leaves before its writes commit..
                        act.runtime_storage.flush()
                if act.closed:  # reset meanwhile (ctx.abort, a failed critical section)
                    raise MailboxActorsError(ErrorCode.UNAVAILABLE,
                                             "the actor was reset while the request ran")
                if scope.writes:
                    act.runtime_storage.check_writes(scope.writes)  # ...nor as a success if lost
                if act.runtime_storage.sql.wiped:  # delete_all: as one never created (RT-15)
                    self.evict(act)
                return result
            except StaleEpoch:  # CL-11: a newer holder of the slot wrote the file: reset
                self.log.warning("actor_reset", namespace=act.namespace, object_id=act.id,
                                 reason="stale_epoch")
                self.evict(act)
                raise
            finally:
                self._release(act)

    def _admit(self, act: Activation) -> None:
        limit = self.settings.max_queue
        if act.pending >= limit:
            self.metrics.inc("actor_overloaded_total", (("namespace", act.namespace),))
            raise Overloaded(f"the actor has {act.pending} requests waiting or running; "
                             f"the limit is {limit}", details={"max_queue": limit})
        act.pending += 1
        act.alarm_only = False
        self._inflight += 1

    def _release(self, act: Activation) -> None:
        act.pending -= 1
        act.last_used_ms = self.clock.now_ms()
        if not act.closed:
            self._active.move_to_end(act.key)
        self._inflight -= 1
        if self._inflight == 0 and self._drained is not None:
            self._drained.set()
        if len(self._active) > self.settings.max_active_actors:
            self._enforce_bound()

    # ---- eviction (RT-9) -------------------------------------------------------------------

    def evict(self, act: Activation, behind: bool = False) -> None:
        """Close the actor's file and drop it from memory; its alarm stays with the scheduler.
        ``behind``: a connection a thread made may be closed by one (False: here, before this
        returns).
        Only for an idle actor (the idle sweep, the bound on open actors): a reset one may still
        have a request or alarm run suspended in it, whose next statement must fail on the
        closed connection, not run (and commit) on one still waiting for its thread."""
        if act.closed:
            return
        act.closed = True
        self._active.pop(act.key, None)
        self.evictions += 1
        self._evicted_since_trim += 1
        key = act.key
        if key in self._opening:
            self._opening[key] = False
        ahead = key in self._made_ahead
        self._made_ahead.discard(key)
        try:
            # A connection a thread made may be closed by one (FileThreads), off the loop.
            act.runtime_storage.close(self._files.close_behind if behind and ahead else None)
        except Exception as e:  # a close failure must not take the node down
            self.log.error("actor_close_failed", namespace=act.namespace, object_id=act.id,
                           error=type(e).__name__)

    def _reset(self, key: Key) -> None:
        """``block_concurrency_while`` failed: drop the in-memory actor, keep its storage."""
        act = self._active.get(key)
        if act is not None:
            self.log.warning("actor_reset", namespace=act.namespace, object_id=act.id)
            self.evict(act)

    def _enforce_bound(self, keep: Activation | None = None) -> None:
        excess = len(self._active) - self.settings.max_active_actors
        if excess > 0:
            soon = self.clock.now_ms() + self.settings.idle_ms
            for act in bound_victims(self._active.values(), excess, keep, soon):
                self.evict(act, behind=True)  # idle: nothing suspended in it

    def evict_idle(self, now_ms: int) -> int:
        """Evict actors idle for ``idle_ms`` but those due within it (``eviction``); how many."""
        victims, kept = idle_victims(self._active.values(), now_ms, self.settings.idle_ms)
        for act in kept:
            act.last_used_ms = now_ms
            self._active.move_to_end(act.key)
        return self._evict_all(victims, trim=False)

    def evict_all_idle(self) -> int:
        """Evict every idle actor now, alarms due or not (the benchmark's cold starts)."""
        return self._evict_all([act for act in self._active.values() if act.idle], trim=True)

    def _evict_all(self, victims: list[Activation], trim: bool) -> int:
        # Nothing of theirs may still be referenced when the allocator gives its free pages back
        # (``give_back``): neither the list nor a loop variable keeps an evicted actor.
        # Idle actors (nothing suspended in them) may be closed behind; before a trim every
        # close is made here: a connection still waiting for a thread would keep its memory
        # past the allocator's give-back.
        count = len(victims)
        victims.reverse()
        while victims:
            self.evict(victims.pop(), behind=not trim)
        if trim or self._evicted_since_trim >= _TRIM_AFTER_EVICTIONS:
            self._evicted_since_trim = 0
            give_back(collect=trim)
        return count

    # Idle eviction is the host's timed work (``Clock.drive``): a loop on the system clock, one
    # step per due instant on a FakeClock.
    def next_due_ms(self) -> int | None:
        for act in self._active.values():
            if act.idle:
                return act.last_used_ms + self.settings.idle_ms
        return None

    async def run_due(self, now_ms: int) -> None:
        self.evict_idle(now_ms)

    async def run(self) -> None:
        period_ms = max(1, min(self.settings.idle_ms, 1000) // 2)
        while True:
            await self.clock.sleep_until(self.clock.now_ms() + period_ms, anyio.Event())
            self.evict_idle(self.clock.now_ms())

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
        self._files.stop()  # what is queued still runs; from now on files close here
        # The allocator is asked to give memory back (a full collection and malloc_trim) only
        # when actors are evicted now or were since it last was: a machine stops a node for
        # every slot it holds, most of which never opened an actor.
        trim = bool(self._active) or self._evicted_since_trim > 0
        self._evict_all(list(self._active.values()), trim=trim)
        await anyio.to_thread.run_sync(self._files.join, 10.0)
        if wal_index.unsettled():  # the indexes of the files just closed emptied before the end
            await anyio.to_thread.run_sync(wal_index.settle)

    # ---- alarms: the host's side of the scheduler's ``AlarmRunner`` (AL-3, AL-4, RT-9) ----------
    # Which actor a wake is for, opening it if it was evicted, admitting the run; the run itself
    # is ``alarm_runs``'. An alarm on an evicted actor spends most of its time opening the file:
    # SQLite opens the database and its log, rebuilds the ``-shm`` index from the log and reads
    # the schema. That part runs in a worker thread (``opening.connect_ahead``; SQLite releases
    # the GIL), so the loop serves other alarms and requests meanwhile and the waits of several
    # opens overlap; the open is finished on the loop (``activate``). Nothing is written in the
    # thread, so a crash there loses nothing.

    async def fire_alarm(self, key: Key, retry_count: int, force: bool = False,
                         turn: Callable[[], Awaitable[None]] | None = None,
                         more_due: Callable[[], bool] | None = None) -> AlarmResult:
        """Run an actor's alarm handler if its stored alarm is due, or at once when ``force``
        (AL-3, AL-4). ``turn``: awaited once an evicted actor's file was opened in a thread,
        before its activation on the loop, or opened on the loop, before its run (the
        scheduler's pool: requests come first).
        ``more_due``: whether other due alarms wait when the run ends (the scheduler's queue);
        while they do, an actor opened for this alarm alone is closed after its run."""
        cls = self._classes.get(key[0])
        if cls is None:
            return AlarmResult(AlarmOutcome.UNKNOWN, None)
        if self.stopping:
            return AlarmResult(AlarmOutcome.BUSY, None)
        act = self._active.get(key)
        # An actor opened here on the loop sheds what its open left cached only if it stays
        # open after the wake: one closed right after its run (a burst's) frees it all anyway.
        unshed = False
        if act is None:  # evicted: open it, ahead in a thread while that pays
            files = self._files
            if files.enabled and files.ahead_pays():
                opened = await self._open_ahead(cls, key, turn)
            else:
                opened = await self._open_on_loop(cls, key, turn)
                if isinstance(opened, AlarmResult):
                    return opened
                if turn is not None:
                    # The open and the run are two pieces of the loop's work: a request that
                    # came during the open goes between them (requests first, ADR 0023).
                    await turn()
                    if self.stopping:
                        return AlarmResult(AlarmOutcome.BUSY, None)
                    if opened.closed:  # evicted or reset meanwhile: open it again
                        return await self.fire_alarm(key, retry_count, force, turn, more_due)
                if not force:
                    alone = await self._run_alone(opened, retry_count, more_due)
                    if alone is not None:
                        return alone
                unshed = True
            if isinstance(opened, AlarmResult):
                return opened
            act = opened
        clock = self.clock
        stored = act.runtime_storage.stored_alarm()
        skip = alarm_runs.not_runnable(act, stored, force, clock.now_ms())
        if skip is not None:
            if unshed and not act.closed:
                act.runtime_storage.shed_caches()
            return skip
        assert stored is not None, "not_runnable let through a wake without an alarm"
        act.alarm_running = True
        act.pending += 1  # an alarm run is never refused by the queue bound
        self._inflight += 1
        try:
            return await alarm_runs.run(act, retry_count, stored,
                                        RequestScope(None, None, self.ids),
                                        clock=clock, event_sink=self.event_sink, log=self.log,
                                        watch=self.watch)
        finally:
            act.alarm_running = False
            self._release(act)
            if act.alarm_only:
                self._after_alarm_only(act, more_due)
            if unshed and not act.closed:
                act.runtime_storage.shed_caches()

    async def _run_alone(self, act: Activation, retry_count: int,
                         more_due: Callable[[], bool] | None) -> AlarmResult | None:
        """The alarm run of an actor this wake opened on the loop, the way an open actor's is
        run (``begin_alarm``: the handler's first step at once, no coroutine or scope of the
        host's own for the run; a handler that ended there with its alarm set in its own
        transaction is settled at once): a burst's evicted alarm is an open, that one step and
        a close. None: it is not for this way (its start hook is to run, its input gate is
        closed, its alarm is not due or a run is under way: the whole way, ``fire_alarm``'s).
        After the run as after ``fire_alarm``'s: closed while other alarms wait and no request
        reached it (``_after_alarm_only``), else its open's caches shed. The outcome is
        returned, and so recorded, only after the run's commit and the close."""
        started = self.begin_alarm(act.key, retry_count, self.clock.now_ms())
        if started is None:
            return None
        if isinstance(started, AlarmResult):
            result = started
        else:
            error: BaseException | None = None
            try:
                await started.step
            except BaseException as e:
                error = e
            result = self.end_alarm(started, error)
            if error is not None and not isinstance(error, Exception):
                raise error  # cancelled (a node stop): the alarm stays stored, run again
        if act.alarm_only:
            self._after_alarm_only(act, more_due)
        if not act.closed:
            act.runtime_storage.shed_caches()
        return result

    def _after_alarm_only(self, act: Activation, more_due: Callable[[], bool] | None) -> None:
        """An actor opened for its alarm, with no request since, after the run: closed at once
        while other due alarms wait (a burst), unless busy again or due again within ``idle_ms``.
        Kept open, it would be evicted as the least recently used a thousand activations later;
        closed now, each open in the burst finds few files open (SQLite's unix layer searches
        every open file's entry under a process-wide mutex at each open: 2,000 entries at 1,000
        open actors). One open and one close per alarm either way."""
        act.alarm_only = False
        if act.closed or not act.idle or self.stopping or more_due is None or not more_due():
            return
        if due_soon(act, self.clock.now_ms() + self.settings.idle_ms):
            return
        self.evict(act, behind=True)  # idle: nothing suspended in it

    # An open, idle actor's due alarm (most of a burst's) is run without a coroutine of its own:
    # the scheduler's worker starts it here, awaits its step itself, and ends it here (a handler
    # that ended in its first step, the usual, is ended at once).
    def begin_alarm(self, key: Key, retry_count: int,
                    now_ms: int) -> alarm_runs.Run | AlarmResult | None:
        """Start the alarm run of an open actor whose stored alarm is due by ``now_ms``, if
        nothing makes it wait (its start hook, its input gate, a run under way); None: the wake
        goes the whole way (``fire_alarm``). A run that ended in its first step with nothing to
        commit is over already: its outcome (``alarm_runs.start``)."""
        act = self._active.get(key)
        if act is None or act.starting or act.alarm_running or act.gate.closed or self.stopping:
            return None
        stored = act.runtime_storage.stored_alarm()
        if stored is None or stored > now_ms:
            return None
        act.alarm_running = True
        act.pending += 1  # an alarm run is never refused by the queue bound
        self._inflight += 1
        try:
            started = alarm_runs.start(act, retry_count, stored, RequestScope(None, None, self.ids),
                                       clock=self.clock, event_sink=self.event_sink, log=self.log,
                                       watch=self.watch)
        except BaseException:
            act.alarm_running = False
            self._release(act)
            raise
        if isinstance(started, AlarmResult):
            act.alarm_running = False
            self._release(act)
        return started

    def end_alarm(self, run: alarm_runs.Run, error: BaseException | None) -> AlarmResult:
        """``begin_alarm``'s run after its step (``error``: what the step raised). A cancellation
        (not an ``Exception``) ends it without an outcome: the caller re-raises it."""
        act = run.act
        try:
            try:
                alarm_runs.finish(run, error, self.log)
            finally:
                run.scope.__exit__()
            if error is not None and not isinstance(error, Exception):
                return AlarmResult(AlarmOutcome.FAILED, None)
            return alarm_runs.settle(run, error, self.log)
        finally:
            act.alarm_running = False
            self._release(act)

    def abandon_alarm(self, key: Key, fired_ms: int | None) -> int | None:
        """After the last retry: clear the alarm, or re-arm it for purposes still pending.
        Returns the alarm stored after it."""
        cls = self._classes.get(key[0])
        if cls is None:
            return None
        act = self.activate(cls, key[1], create=False, own=True)
        return None if act is None else alarm_runs.abandon(act, fired_ms, self.clock.now_ms())

    async def _open_on_loop(self, cls: type[Actor[Any]], key: Key,
                            turn: Callable[[], Awaitable[None]] | None = None,
                            ) -> Activation | AlarmResult:
        """Activate an evicted actor for its alarm on the loop, or the outcome that ends the wake:
        GONE (no such actor), UNAVAILABLE (its file cannot be opened now), BUSY (the node stops
        meanwhile). Three steps, with ``turn`` awaited between them (requests first, ADR 0023):
        the file looked at and connected (``opening.connect_file``); its version read, where
        SQLite rebuilds its ``-shm`` index from the log (``Connecting.recovered``); then the
        rest of the open and the activation. In one step, a request that came during the open
        waited for all of it (the longest piece of the loop's work in a burst on evicted actors,
        measured); in two (connected and recovered at once, then the rest), the first was still
        the longest (session 20). A step that finds anything unusual (no file, damage, a
        refusal) leaves the file to the whole open in one step, which reports it as always."""
        files = self._files
        # Does the disk make an open on the loop wait? Its steps timed while the threads are
        # idle, when ``ahead_pays`` asked for it (the waits for the turns between them are not
        # the open's): ``wall`` and, of it, ``busy`` on a CPU or queued for one.
        sample = files.enabled and files.timing and files.idle
        wall = busy = 0.0
        if sample:
            began, was = time.perf_counter(), files.busy_s()
        step: Connecting | Connected | None = None
        file: str | None = None
        if turn is not None:
            try:
                file = self.paths.file_for(*key, own=True)
                step = connect_file(file, self.settings.durability)
            except MailboxActorsError:
                pass
        connected: Connected | None = None
        while step is not None:
            if sample:
                wall += time.perf_counter() - began
                busy += files.busy_s() - was
            assert turn is not None and file is not None
            self._opening[key] = True
            try:
                await turn()
            except BaseException:
                step.close(file)  # cancelled (a node stop): nobody takes it any more
                raise
            finally:
                fresh = self._opening.pop(key, False)
            sample = sample and files.idle
            if sample:
                began, was = time.perf_counter(), files.busy_s()
            if self.stopping or not fresh:
                # Opened or closed on the loop meanwhile (a request, an eviction, a
                # delete_all): the file under this connection may be one since removed.
                step.close(file)
                if self.stopping:
                    return AlarmResult(AlarmOutcome.BUSY, None)
                break
            if isinstance(step, Connected):
                connected = step
                break
            try:
                step = step.recovered(file)
            except MailboxActorsError:
                break  # closed: the whole open in one step reports it
        try:
            # The rest of the open; or, after a step that found anything unusual, the whole
            # open in one step (on the path made for the first: named once an alarm).
            return self._activated(cls, key, None, file, shed=False, connected=connected)
        finally:
            if sample:
                files.opened_on_loop(wall + time.perf_counter() - began,
                                     busy + files.busy_s() - was)

    async def _open_ahead(self, cls: type[Actor[Any]], key: Key,
                          turn: Callable[[], Awaitable[None]] | None = None,
                          ) -> Activation | AlarmResult:
        """``_open_on_loop`` with the file's connection made ahead in a worker thread, then
        ``turn`` awaited (the file is still watched meanwhile); BUSY when the node stops
        meanwhile."""
        try:
            path = self.paths.path_for(*key, own=True)  # once: activate() is given it
        except MailboxActorsError:
            return AlarmResult(AlarmOutcome.MALFORMED, None)
        self._opening[key] = True
        try:
            ahead = await self._files.open(path, self.settings.durability, self.settings.limits,
                                           META_KEYS)
            if turn is not None and ahead is not None:
                try:
                    await turn()
                except BaseException:
                    ahead.close(path)  # cancelled (a node stop): nobody takes it any more
                    raise
        finally:
            fresh = self._opening.pop(key, False)
        # No await from here to activate(): the connection is the activation's, or closed.
        if ahead is not None and (self.stopping or not fresh):
            # Opened or closed on the loop meanwhile (a request, an eviction, a delete_all): the
            # file under this connection may be one since removed, so it goes unused.
            ahead.close(path)
            ahead = None
        if self.stopping:
            return AlarmResult(AlarmOutcome.BUSY, None)
        return self._activated(cls, key, ahead, path)


    def _activated(self, cls: type[Actor[Any]], key: Key, ahead: OpenedAhead | None,
                   path: str | Path | None, shed: bool = True,
                   connected: Connected | None = None) -> Activation | AlarmResult:
        opened = key not in self._active  # else a request activated it while a thread opened
        try:
            act = self.activate(cls, key[1], create=False, ahead=ahead, path=path, shed=shed,
                                own=True, connected=connected)
        except MailboxActorsError:
            # A key that is no id's form can never open a file: dropped, not looked at again.
            outcome = AlarmOutcome.UNAVAILABLE if has_id_form(key[1]) else AlarmOutcome.MALFORMED
            return AlarmResult(outcome, None)
        if act is None:
            return AlarmResult(AlarmOutcome.GONE, None)
        act.alarm_only = opened
        return act

    def scan_alarms(self, progress: Callable[[int], None] | None = None,
                    stop: threading.Event | None = None) -> dict[Key, int]:
        """Read the alarm of every actor file on disk (when the node's index is missing or
        incomplete); ``stop`` set: end early (the node stops)."""
        return scan_alarms(self.actors_dir, self._classes_with_keys(), self.settings,
                           self.clock, self.log, progress, stop)

    def _classes_with_keys(self) -> Mapping[str, bytes]:
        return {ns: self._keys[ns] for ns in self._classes}

