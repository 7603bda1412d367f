"""``Node``: one data directory's runtime, assembled and started (embedded use and ``serve``).

It takes the data-directory lock, loads every pending alarm (scanning actor files when the index is
missing), registers the objects, and hands its timed work (alarms, eviction, queue consumers) to the
clock, which runs their loops (``SystemClock``) or steps them as a test advances it (``FakeClock``).
Every collaborator is made here, once, and handed to whoever uses it. It holds no business rules.
"""

from __future__ import annotations

import functools
import gc
import os
import sqlite3
import threading
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from mailbox_actors.alarms.book import AlarmBook
from mailbox_actors.alarms.index import AlarmIndex
from mailbox_actors.node.alarm_index import (
    check_file,
    finish_scan,
    mark_incomplete,
    open_alarm_index,
    rebuild_damaged,
)
from mailbox_actors.node.forwarding import Forwarding, Peers
from mailbox_actors.node.mail import transport_from_settings
from mailbox_actors.node.shared_state import open_shared_state, shared_state
from mailbox_actors.platform.clock import Clock, Loop, SystemClock, TimedWork
from mailbox_actors.platform.descriptors import actor_bound, nofile_limit
from mailbox_actors.platform.dns.resolver import RESOLVER, ResolverOnFirstUse
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.locks import DataDirLock
from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.memory import memory_bound, physical_memory
from mailbox_actors.platform.metrics import Metrics
from mailbox_actors.platform.process_metrics import register_process_metrics
from mailbox_actors.platform.rng import Rng, SystemRng
from mailbox_actors.platform.services import Services
from mailbox_actors.platform.storage.limits import Durability
from mailbox_actors.runtime.classes import DeferredActor
from mailbox_actors.runtime.settings import (
    DEFAULT_ID_SECRET,
    DEFAULT_MAX_ACTIVE_ACTORS,
    RuntimeSettings,
)

if TYPE_CHECKING:  # what a node without a control database or a transport never imports
    from mailbox_actors.alarms.scheduler import AlarmScheduler
    from mailbox_actors.platform.control.database import ControlDb
    from mailbox_actors.platform.mail.transport import Transport
    from mailbox_actors.platform.queues import QueueService
    from mailbox_actors.rpc.router import Placement, Router
    from mailbox_actors.runtime.actor import Actor
    from mailbox_actors.runtime.host import ActorHost
    from mailbox_actors.runtime.outbox import EventSink
    from mailbox_actors.wire.carrier import InspectionPage

__all__ = ["METRIC_PREFIX", "Node"]

METRIC_PREFIX = "mailbox_actors_"  # every exported metric name starts so (OPS-10)
_warned_builtin_secret: list[bool] = []  # non-empty once a node said id_secret_builtin


class Node:
    """One node. Use ``async with Node(settings) as node:``; call with ``node.call(...)``."""

    def __init__(self, settings: RuntimeSettings, *, clock: Clock | None = None,
                 rng: Rng | None = None,
                 objects: Sequence[type[Actor] | DeferredActor] | None = None,
                 progress: Callable[[str], None] | None = None,
                 services: Services | None = None, peers: Peers | None = None,
                 placement: Placement | None = None,
                 shared_control: tuple[Any, Any] | None = None,
                 answer_first: bool = False,
                 alarm_index_check: Callable[[Path], str | None] | None = None,
                 ) -> None:
        """``objects``: the classes served (default: the platform's, each imported at its
        namespace's first use, ``objects.deferred_objects``). ``placement`` and
        ``shared_control``: a slot of a machine (``cluster.machine``), whose calls
        to other slots go through the machine, and whose events go to the machine's control
        database and queues (opened, consumed and closed by the machine, not by this node).
        ``answer_first`` (``serve``): what a start can put off waits for the node's first answer
        (``answered``, or half a second after ``start()`` returned): the alarm index's quick
        check and reading its rows (the index is served with meanwhile: a damaged one is then set
        aside and rebuilt, alarms set meanwhile kept), making and opening the control
        database and queues (SQLite files), which whatever needs them waits for
        (``shared_state_opened``), and, when every object is deferred, making the actor side
        (``router``, ``host``, ``scheduler``: the actor and storage code), which the first call
        makes at once if it comes before. ``alarm_index_check``: that check of the index's file, run on
        a worker thread (``alarm_index.check_file`` by default)."""
        self.log = get_logger("mailbox_actors.node")
        # OPS-4: never more open files than descriptors, nor more actors than memory holds.
        bound = memory_bound(actor_bound(settings.max_active_actors))
        if bound < settings.max_active_actors:
            # The default is a ceiling meant to be lowered to fit the machine: a start that does
            # just that is quiet. A value an operator chose that does not fit is warned about.
            chosen = settings.max_active_actors != DEFAULT_MAX_ACTIVE_ACTORS
            (self.log.warning if chosen else self.log.debug)(
                "max_active_actors_bounded", node=settings.node_name,
                configured=settings.max_active_actors,
                bound=bound, nofile_limit=nofile_limit(), memory_bytes=physical_memory())
            settings = msgspec.structs.replace(settings, max_active_actors=bound)
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.rng: Rng = rng or SystemRng()
        self.ids = Ids(self.clock, self.rng)
        self.metrics = Metrics(prefix=METRIC_PREFIX)
        self._progress = progress
        self._lock = DataDirLock(settings.path)
        if objects is None:  # the platform's objects, by name: none is imported by a start
            from mailbox_actors.objects import deferred_objects

            objects = deferred_objects()
        self._objects = tuple(objects)
        # The mail transport (CA-14): a caller's own (a test's fake) is kept; else the settings'
        # (none: no transport, mail stays queued). The node closes only the one it built.
        services = services or Services()
        self.mail_transport: Transport | None = None
        self._own_transport = False
        if services.items() or settings.transport != "none":
            # The transport's key (and the wire types its module declares) only where there may
            # be one: a node with no services given and no transport loads none of it.
            from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT

            self.mail_transport = services.get(MAIL_TRANSPORT)
            if self.mail_transport is None:
                self.mail_transport = transport_from_settings(settings, self.clock)
                if self.mail_transport is not None:
                    services = Services({**dict(services.items()),
                                         MAIL_TRANSPORT: self.mail_transport})
                    self._own_transport = True
        # The cluster's control database and queues: made now, opened by start(); or both made
        # and opened after start() returned, on the system clock and SQLite files alone (an
        # unreachable PostgreSQL must stop a start with its setting's error).
        self.control_db: ControlDb | None = None
        self.queues: QueueService | None = None
        event_sink: EventSink | None = None  # None: the runtime's recording sink
        self._shared_control: Any = None
        self._answer_first = answer_first and isinstance(self.clock, SystemClock)
        self._index_check = alarm_index_check or check_file
        self._shared_later = (self._answer_first and shared_control is None
                              and settings.postgres is None and settings.control_db is not None)
        # Set once the control database and queues are open (at once when there are none).
        self._shared_opened = anyio.Event()
        self.shared_state_error: BaseException | None = None  # why a later open failed
        shared = None if self._shared_later else shared_control or shared_state(
            settings, clock=self.clock, ids=self.ids, metrics=self.metrics)
        if self._shared_later:
            event_sink = _SinkOnceOpen(self)
        elif shared_control is not None:
            from mailbox_actors.webhooks.publish import ControlEventSink
            self._shared_control = shared_control[0]
            event_sink = ControlEventSink(shared_control[0], shared_control[1])
        elif shared is not None:
            from mailbox_actors.webhooks.publish import ControlEventSink
            self.control_db, self.queues = shared
            event_sink = ControlEventSink(self.control_db, self.queues)
        self.alarm_book = AlarmBook(self.clock.now_ms)
        # The cluster (CL-2, RPC-9): for the HTTP app's requests and this node's actors' calls.
        self.forwarding = Forwarding(peers, now_ms=self.clock.now_ms, metrics=self.metrics, log=self.log)
        # The actor side (the router, the host it delivers to, the scheduler that runs the host's
        # alarms): made now, or, for answer_first with every object deferred (serve without
        # objects of the user's), once the node answered or at its first use: it imports the
        # actor and storage code, which the first answer (/healthz) does not need.
        self._actor_parts = (event_sink, services, placement or self.forwarding)
        self._router: Router | None = None
        self._host: ActorHost | None = None
        self._scheduler: AlarmScheduler | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._actors_later = self._answer_first and all(
            isinstance(entry, DeferredActor) for entry in self._objects)
        if not self._actors_later:
            self._make_actors()
        self.webhooks: Any = None  # a WebhookDeliverer once the control database is open
        self.consumers: list[Any] = []
        self._started = False
        # Set when a background loop (alarms, eviction, a queue consumer) ended with an error:
        # the node can no longer keep its promises, so whoever runs it should stop it.
        self.failed = anyio.Event()
        # Set at the node's first answer (``answered``); the second also by the first thing
        # that needs the control database: what a start put off waits for them (answer_first).
        self._answered = anyio.Event()
        self._shared_wanted = anyio.Event()
        self._event_sink: EventSink | None = None  # the control's, once opened later
        # Set once every alarm is known: the index's rows read (and a scan merged, when the index
        # was incomplete). On the system clock this comes after start() returns.
        self.alarms_loaded = anyio.Event()
        self.failure: str | None = None
        self._describe_metrics()

    # ---- lifetime --------------------------------------------------------------------------

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def start(self) -> None:
        """Lock the data directory, find every pending alarm, start the loops."""
        self._lock.acquire()
        try:
            # answer_first: the index is trusted until its check after the first answer.
            opened = open_alarm_index(
                self.settings.path / "alarms.sqlite",
                durability_full=self.settings.durability == Durability.FULL,
                now_ms=self.clock.now_ms, say=self._say,
                quick_check=None if self._answer_first else AlarmIndex.quick_check)
            # The index's rows (and a scan, when it is incomplete) are read below: before serving
            # on a FakeClock, in the background on the system clock (a start does not grow with
            # the alarms; those due meanwhile fire late, never not at all).
            self.alarm_book.open(opened.index, {})
            self.alarm_book.scanning()
            if not self._shared_later:
                await self._open_control()
                self._shared_opened.set()
            if (self.settings.id_secret == DEFAULT_ID_SECRET and isinstance(self.clock, SystemClock)
                    and not _warned_builtin_secret):
                # OPS-8: anyone who reads the source can mint ids under the built-in secret. Said
                # once per process: a program that starts many nodes (a benchmark) learns it once.
                _warned_builtin_secret.append(True)
                self.log.warning("id_secret_builtin", advice="set RuntimeSettings(id_secret=...) "
                                 "(serve and cluster generate one per data directory)")
            # The clock takes the timed work: the loops it answers with run here (a FakeClock
            # answers none: its advance() steps the work).
            loops = [(name, loop) for name, w in self._timed_work()
                     if (loop := self.clock.loop_for(w)) is not None]
            if self._actors_later:
                loops.append(("actors", self._make_actors_once_answered))
            if loops:
                loops.append(("alarm_index_load", functools.partial(
                    self._load_alarms_in_background, opened.complete)))
                if self._shared_later:
                    loops.append(("shared_state_open", self._open_shared_state_later))
            else:
                self._load_alarms(opened.complete)
            self.log.info("node_started", node=self.settings.node_name,
                          data_dir=str(self.settings.path),
                          alarms_pending=self.alarm_book.pending_count,
                          alarms_overdue=self._overdue(),
                          alarms_loading=self.alarm_book.is_scanning)
            if loops:
                self._tg = anyio.create_task_group()
                await self._tg.__aenter__()
                for name, loop in loops:
                    self._tg.start_soon(self._guarded, name, loop)
        except BaseException:
            # Close what was opened: an aiosqlite connection left open keeps its (non-daemon)
            # thread, and with it the process, alive after the error.
            with anyio.CancelScope(shield=True):
                if self._tg is not None:
                    self._tg.cancel_scope.cancel()
                    await self._tg.__aexit__(None, None, None)
                    self._tg = None
                for _, work in self._timed_work():
                    self.clock.release(work)
                await self._close_files()
            self._lock.release()
            raise
        self._started = True

    async def stop(self, grace_ms: int | None = None) -> None:
        """Drain requests in flight (up to the grace period), stop alarms, close every file."""
        if not self._started:
            return
        self._started = False
        try:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
                await self._tg.__aexit__(None, None, None)
                self._tg = None
            for _, work in self._timed_work():
                self.clock.release(work)
            if self._host is not None:  # else no request came: nothing in flight
                await self._host.stop(grace_ms)
            self.alarm_book.flush_index()
        finally:
            with anyio.CancelScope(shield=True):
                await self._close_files()
                await self._close_transport()
            self._lock.release()
            self.log.info("node_stopped", node=self.settings.node_name)

    async def _close_transport(self) -> None:
        if self._own_transport and self.mail_transport is not None:
            try:
                await self.mail_transport.aclose()
            except Exception as e:
                self.log.error("node_close_failed", node=self.settings.node_name,
                               what="mail_transport", error=type(e).__name__)

    async def _close_files(self) -> None:
        """Close the alarm index, the webhook pool, the queues and the control database, each even
        if another fails (the failure is logged)."""
        closers: list[tuple[str, Callable[[], Awaitable[None] | None]]] = []
        if self.alarm_book.index is not None:
            closers.append(("alarm_index", self.alarm_book.index.close))
        if self.webhooks is not None:
            closers.append(("webhooks", self.webhooks.aclose))
        for name, closing in (("queues", self.queues), ("control_db", self.control_db)):
            if closing is not None:
                closers.append((name, closing.close))
        for name, close in closers:
            try:
                done = close()
                if done is not None:
                    await done
            except Exception as e:
                self.log.error("node_close_failed", node=self.settings.node_name, what=name,
                               error=type(e).__name__)

    async def _open_control(self) -> None:
        """The cluster's control database and queues, the event sink and the webhook consumers."""
        if self.control_db is None or self.queues is None:
            return
        from mailbox_actors.platform.queues import DeadLetterRecorder
        from mailbox_actors.webhooks.delivery import WebhookDeliverer
        st = self.settings
        await open_shared_state(self.control_db, self.queues)
        self.webhooks = WebhookDeliverer(self.control_db, self.queues, clock=self.clock,
                                         rng=self.rng, metrics=self.metrics,
                                         ca_file=st.webhook_ca_file)
        self.consumers = [*self.webhooks.consumers(count=st.webhook_consumers)]
        # Letters this node makes wake its recorder at once; other nodes' wait for a poll, which
        # need not be frequent: a letter is recorded, not delivered.
        self.consumers.append(DeadLetterRecorder(self.queues, self.consumers[0].dead_letter_queue,
                                                 poll_interval_s=0.5))

    def answered(self) -> None:
        """Whoever answers for the node (the HTTP app) gave its first answer: the work put off
        until then may take the loop."""
        self._answered.set()
        self._shared_wanted.set()

    async def shared_state_opened(self) -> None:
        """Wait until the control database and queues are open (at once when they are, or when
        there are none). A node whose later open failed never opens them: it stops (``failed``)."""
        if not self._shared_opened.is_set():
            self._shared_wanted.set()  # needed now: opened now, whether answered or not
            await self._shared_opened.wait()

    async def _open_shared_state_later(self) -> None:
        """The control database and queues, made and opened once the node answers (the first
        answer, or a moment after start), then their consumers started like every loop."""
        with anyio.move_on_after(_PUT_OFF_AT_MOST_S):
            await self._shared_wanted.wait()
        shared = shared_state(self.settings, clock=self.clock, ids=self.ids, metrics=self.metrics)
        assert shared is not None and self._tg is not None
        self.control_db, self.queues = shared
        try:
            await self._open_control()
        except Exception as e:
            # serve re-raises it once stopped: a damaged control file exits as at a start (2).
            self.shared_state_error = e
            raise
        from mailbox_actors.webhooks.publish import ControlEventSink

        self._event_sink = ControlEventSink(self.control_db, self.queues)
        self._shared_opened.set()
        for c in self.consumers:
            loop = self.clock.loop_for(c)
            if loop is not None:
                self._tg.start_soon(self._guarded, f"consumer:{c.queue}", loop)

    async def _events_days(self, tenant_id: str) -> int | None:
        await self.shared_state_opened()
        control = self.control_db or self._shared_control
        if control is None:
            return None  # embedded use: the default applies
        tenant = await control.get_tenant(tenant_id)
        return None if tenant is None else tenant.events_days

    def _timed_work(self) -> list[tuple[str, TimedWork]]:
        return [*self._actor_work(), *((f"consumer:{c.queue}", c) for c in self.consumers)]

    def _actor_work(self) -> list[tuple[str, TimedWork]]:
        if self._scheduler is None or self._host is None:  # not made yet (answer_first)
            return []
        return [("alarm_scheduler", self._scheduler), ("eviction", self._host)]

    # ---- the actor side --------------------------------------------------------------------

    @property
    def router(self) -> Router:
        """The node's front door for calls (made at its first use when the start put it off)."""
        return self._router or self._make_actors()

    @property
    def host(self) -> ActorHost:
        """The live activations, and the only way a request or alarm reaches an actor."""
        return self.router.host

    @property
    def scheduler(self) -> AlarmScheduler:
        """Fires the book's due alarms through the host (made with the router)."""
        if self._scheduler is None:
            self._make_actors()
            assert self._scheduler is not None
        return self._scheduler

    def _make_actors(self) -> Router:
        """The router, its host and the alarm scheduler, the objects registered; on a started
        node (a start that put them off), their loops begin now."""
        from mailbox_actors.alarms.scheduler import AlarmScheduler
        from mailbox_actors.rpc.router import Router

        event_sink, services, placement = self._actor_parts
        if event_sink is None:
            from mailbox_actors.runtime.outbox import RecordingEventSink

            event_sink = RecordingEventSink()
        st = self.settings
        router = Router(st, ids=self.ids, clock=self.clock, rng=self.rng, metrics=self.metrics,
                        alarm_sinks=self.alarm_book, event_sink=event_sink,
                        events_days=self._events_days, services=_with_resolver(services, st),
                        placement=placement)
        for cls in self._objects:
            router.register(cls)
        self._scheduler = AlarmScheduler(self.alarm_book, router.host, clock=self.clock,
                                         rng=self.rng, concurrency=st.alarm_concurrency,
                                         metrics=self.metrics)
        self._host = router.host
        self._router = router
        if self._tg is not None:  # started: the loops the start could not begin
            for name, work in self._actor_work():
                loop = self.clock.loop_for(work)
                if loop is not None:
                    self._tg.start_soon(self._guarded, name, loop)
        return router

    async def _make_actors_once_answered(self) -> None:
        """answer_first: the actor side, made once the node answered (or a moment after its
        start), unless a request made it first."""
        with anyio.move_on_after(_PUT_OFF_AT_MOST_S):
            await self._answered.wait()
        if self._router is None:
            self._make_actors()

    async def _guarded(self, name: str, loop: Loop) -> None:
        """Run a background loop; if it ends with an error, say where and set ``failed`` (a node
        that kept answering calls with its alarms or deliveries dead would fail silently)."""
        try:
            await loop()
        except Exception as e:
            where = traceback.extract_tb(e.__traceback__)[-1]
            # The type and the place only: an exception's text may quote content.
            self.log.critical("node_loop_failed", node=self.settings.node_name, loop=name,
                              error=type(e).__name__,
                              at=f"{Path(where.filename).name}:{where.lineno} in {where.name}")
            if self.failure is None:
                self.failure = f"{name} failed ({type(e).__name__})"
            self.failed.set()

    def _load_alarms(self, complete: bool) -> None:
        """Every alarm of the index, and of a scan when it is incomplete, before serving."""
        book = self.alarm_book
        assert book.index is not None
        book.merge_found(book.index.load(), indexed=True, last=complete)
        if not complete:
            self._merge_scan(self.host.scan_alarms(self._scan_progress))
        self.alarms_loaded.set()

    async def _load_alarms_in_background(self, complete: bool) -> None:
        """The index's rows read on a connection of a worker thread, merged on the loop; then,
        when it is incomplete, the actor files scanned there (SQLite releases the GIL while it
        reads) and merged into the book and the index (AL-4)."""
        book = self.alarm_book
        assert book.index is not None
        path = book.index.path
        if self._answer_first:  # the rows are read while the loop is busy answering otherwise
            with anyio.move_on_after(_PUT_OFF_AT_MOST_S):
                await self._answered.wait()
        fresh = self._answer_first and complete and not await self._index_sound(path)
        if fresh:  # set aside: the book wrote what it holds to a fresh index; the scan fills it
            complete = False
        try:
            rows = {} if fresh else await anyio.to_thread.run_sync(AlarmIndex.read, path,
                                                                   abandon_on_cancel=True)
        except sqlite3.DatabaseError as e:  # damage the quick check did not see: scan instead
            if isinstance(e, sqlite3.OperationalError):
                raise
            self.log.warning("alarm_index_unreadable", node=self.settings.node_name,
                             error=type(e).__name__, action="scanning the actor files")
            mark_incomplete(path)
            rows, complete = {}, False
        book.merge_found(rows, indexed=True, last=complete)
        gc.freeze()  # what the scheduler's loop froze at its start, the alarms joined since
        self.log.info("alarm_index_loaded", node=self.settings.node_name,
                      alarms_pending=book.pending_count, alarms_overdue=self._overdue())
        if complete:
            self.alarms_loaded.set()
            return
        stop = threading.Event()
        try:
            found = await anyio.to_thread.run_sync(self.host.scan_alarms, self._scan_progress,
                                                   stop, abandon_on_cancel=True)
        finally:
            stop.set()  # a node stopped meanwhile: the thread ends at its next file
        self._merge_scan(found)
        self.alarms_loaded.set()

    async def _index_sound(self, path: Path) -> bool:
        """The index the node serves with, checked (``answer_first``: after the first answer, on a
        worker thread). Damaged: set aside and a fresh one taken by the book, with every alarm
        set meanwhile; False (the actor files are scanned for the rest)."""
        try:
            problem = await anyio.to_thread.run_sync(self._index_check, path,
                                                     abandon_on_cancel=True)
        except sqlite3.DatabaseError as e:  # damage that stops the check itself
            if isinstance(e, sqlite3.OperationalError):
                raise  # locked, out of descriptors: not the file's fault
            problem = type(e).__name__
        if problem is None:
            return True
        book = self.alarm_book
        assert book.index is not None
        book.index.close()
        opened = rebuild_damaged(path, problem,
                                 durability_full=self.settings.durability == Durability.FULL,
                                 now_ms=self.clock.now_ms, say=self._say)
        try:
            book.replace_index(opened.index)
        except (sqlite3.Error, OSError) as e:  # a full disk: the book still fires them; the
            # index stays marked incomplete, so the next start scans again
            self.log.warning("alarm_index_rebuild_unsaved", node=self.settings.node_name,
                             error=type(e).__name__, found=len(book.entries))
        return False

    def _overdue(self) -> int:
        now = self.clock.now_ms()
        return sum(1 for e in self.alarm_book.entries.values() if e.at <= now)

    def _scan_progress(self, n: int) -> None:
        self._say(f"scanning actor files for alarms: {n} so far")

    def _merge_scan(self, found: dict[tuple[str, str], int]) -> None:
        book = self.alarm_book
        try:
            added = book.merge_found(found, indexed=False, last=True)
            assert book.index is not None
            finish_scan(book.index)
        except (sqlite3.Error, OSError) as e:  # a full disk: fired anyway, scanned again next start
            self.log.warning("alarm_index_rebuild_unsaved", node=self.settings.node_name,
                             error=type(e).__name__, found=len(found))
            return
        self.log.info("alarm_index_rebuilt", node=self.settings.node_name, found=len(found), added=added)
        self._say(f"the alarm index is rebuilt: {len(found)} alarms in the actor files")

    def _say(self, text: str) -> None:
        if self._progress is not None:
            self._progress(text)

    # ---- calling ---------------------------------------------------------------------------

    async def call_bytes(self, namespace: str, object_id: str, body: bytes) -> bytes:
        """The whole RPC path, envelope bytes in, result bytes out."""
        return await (self._router or self._make_actors()).call_bytes(namespace, object_id, body)

    async def call(self, namespace: str, object_id: str, req: Any, *,
                   tenant_id: str | None = None, identity_id: str | None = None,
                   deadline_ms: int | None = None, request_id: str | None = None) -> Any:
        """In-process call; returns the ok value or raises ``MailboxActorsError``."""
        return await self.router.call(namespace, object_id, req, tenant_id=tenant_id, identity_id=identity_id,
                                      deadline_ms=deadline_ms, request_id=request_id)

    def id_from_name(self, namespace: str, name: str) -> str:
        return self.router.id_from_name(namespace, name)

    def object_classes(self) -> list[type[Actor]]:
        """Every class served, in registration order; deferred ones are imported now (for a
        document of them all: the OpenAPI description)."""
        classes = (self.host.actor_class(entry.namespace) for entry in self._objects)
        return [cls for cls in classes if cls is not None]

    def inspect_deliveries(self, object_id: str, *, namespace: str = "identity_mailbox",
                           after: str | None = None, limit: int | None = None) -> InspectionPage:
        """CA-10: a page of a Carrier user's delivery records (an IdentityMailbox's by default; a
        Notifier's or a user's own actor's by its namespace), read from its file without
        activating it (no owner, no migration, no alarm). For callers that admitted an operator."""
        from mailbox_actors.objects.delivery_inspection import DEFAULT_PAGE, inspect_deliveries
        oid = self.router.id_from_string(namespace, object_id)
        return inspect_deliveries(self.host.path_for(namespace, oid), after,
                                  DEFAULT_PAGE if limit is None else limit)

    def new_unique_id(self, namespace: str) -> str:
        return self.router.new_unique_id(namespace)

    async def fire_alarm_now(self, namespace: str, object_id: str) -> bool:
        """Run the actor's alarm handler now if it has an alarm (Miniflare's runDurableObjectAlarm).
        Returns whether a handler ran."""
        assert self._started, "the node is not started"
        key = (namespace, self.router.id_from_string(namespace, object_id))
        return await self.scheduler.fire_now(key)

    # ---- observing -------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        host = self._host  # None: no actor made yet (answer_first)
        return {
            "status": "ok" if self._started and not (host is not None and host.stopping) else "stopping",
            "node": self.settings.node_name,
            "pid": os.getpid(),
            "actors_active": 0 if host is None else host.active_count,
            "alarms_pending": self.alarm_book.pending_count,
            "data_dir": str(self.settings.path),
        }

    def _describe_metrics(self) -> None:
        m = self.metrics
        ns = ("namespace",)
        m.describe("rpc_requests_total", "RPC requests handled, by namespace, op and code",
                   "counter", ("namespace", "op", "code"))
        m.describe("rpc_owner_mismatch_total", "Calls whose tenant/identity did not match the "
                   "object's owner (always a bug upstream)", "counter", ns)
        m.describe("alarms_fired_total", "Alarm handlers that completed", "counter", ns)
        m.describe("alarm_retries_total", "Alarm handler failures scheduled for retry", "counter", ns)
        m.describe("alarms_abandoned_total", "Alarms given up after six retries", "counter", ns)
        m.describe("alarms_dropped_total", "Alarm index rows dropped because their key is no "
                   "actor id (a damaged index)", "counter", ns)
        m.describe("actor_loop_blocked_total", "Handler steps that held the event loop longer "
                   "than loop_block_warn_ms (RT-17), by namespace and op", "counter",
                   ("namespace", "op"))
        m.describe("alarms_replaced_total", "Alarm handlers that failed after setting a new alarm "
                   "(it runs instead of a retry, AL-7)", "counter", ns)
        m.describe("actor_overloaded_total", "Requests refused because an actor's queue was full",
                   "counter", ns)
        m.describe("queue_dead_letters_total", "Queue messages moved to a dead-letter queue, by "
                   "queue", "counter", ("queue",))
        register_process_metrics(m)
        m.register_gauge_fn("actors_active", lambda: float(0 if self._host is None
                                                           else self._host.active_count),
                            "Actors with an open SQLite file")
        m.register_gauge_fn("alarms_pending", lambda: float(self.alarm_book.pending_count),
                            "Alarms this node holds, evicted actors included")


# What a start put off until the node's first answer (answer_first) begins this long after the
# start when no answer comes: the alarm index's rows, the control database and queues.
_PUT_OFF_AT_MOST_S = 0.5


class _SinkOnceOpen:
    """The event sink of a node whose control database opens after its start: events published
    meanwhile wait for it (never fail), then go to the control database's sink."""

    __slots__ = ("_node",)

    def __init__(self, node: Node) -> None:
        self._node = node

    async def publish(self, namespace: str, object_id: str, events: Sequence[Any]) -> None:
        if not events:
            return
        node = self._node
        await node.shared_state_opened()
        assert node._event_sink is not None
        await node._event_sink.publish(namespace, object_id, events)


def _with_resolver(services: Services | None, settings: RuntimeSettings) -> Services:
    """The node's services, with a real resolver built from the dns settings unless one was given
    (DM-1): ``serve`` and ``cluster`` point DomainMonitor at ``dns_nameservers`` this way."""
    items = dict(services.items()) if services is not None else {}
    if items.get(RESOLVER) is None:
        items[RESOLVER] = ResolverOnFirstUse(settings.dns)
    return Services(items)
