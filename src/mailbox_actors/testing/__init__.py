"""Helpers for testing code built on mailbox-actors: what Miniflare users ask for, in Python.

``TestRuntime`` is a node with a ``FakeClock``, a seeded ``Rng`` and its own temporary data
directory (isolated storage per test; alarms never leak between tests because each test gets its own
node). ``advance(ms)`` fires due alarms in order; ``fire_alarm_now`` runs an actor's alarm at once.
``run_in_actor``, ``list_ids``, ``get_alarm`` and ``set_alarm`` reach into live actors (TK-2);
``raise_errors=True`` re-raises a handler's exception in the test instead of ``internal_error``.
``RecordingTransport`` is the scriptable mail transport to pass in ``services``. The pytest plugin
(``mailbox_actors.testing.pytest_plugin``, installed with the package) gives these as fixtures.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import msgspec

from mailbox_actors.node.forwarding import Peers
from mailbox_actors.node.inspection import Inspector
from mailbox_actors.node.node import Node
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.platform.dns.fake import FakeResolver
from mailbox_actors.platform.dns.resolver import RESOLVER
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.rng import SeededRng
from mailbox_actors.platform.services import ServiceKey, Services
from mailbox_actors.rpc.router import op_name
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.outbox import EventSink, RecordingEventSink
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.testing.cluster import TestCluster
from mailbox_actors.testing.inspection import (
    ErrorTap,
    actor_ids_on_disk,
    run_in_actor,
    stored_alarm,
)
from mailbox_actors.testing.webhooks import WebhookReceiver
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError
from mailbox_actors.wire.inbound import RegisterWait, WaitFilter, WaitPoll

__all__ = ["FakeClock", "FakeResolver", "NotStarted", "RecordingTransport", "SeededRng",
           "TestCluster", "TestRuntime", "WebhookReceiver"]

T = TypeVar("T")


class NotStarted(RuntimeError):
    """A TestRuntime used before ``async with`` started it, or after it stopped (TK-4)."""


class TestRuntime:
    """An in-process node for one test. ``async with TestRuntime() as rt: ...``

    ``wrap_event_sink``: builds the sink outbox alarms publish to around the node's own (a test's
    failing or hanging sink); ``events`` still reads the node's own recording."""

    __test__ = False  # not a pytest test class

    def __init__(self, data_dir: Path | str | None = None, *, start_ms: int = 1_767_225_600_000,
                 seed: int = 0, objects: Sequence[type[Actor]] = DEFAULT_OBJECTS,
                 control: bool = False, services: Mapping[ServiceKey[Any], Any] | None = None,
                 raise_errors: bool = False, peers: Peers | None = None,
                 wrap_event_sink: Callable[[EventSink], EventSink] | None = None,
                 **settings: Any) -> None:
        self._own_dir = data_dir is None
        self.raise_errors = raise_errors
        self._errors = ErrorTap()
        self._started = False
        self.data_dir = Path(data_dir) if data_dir is not None else Path(
            tempfile.mkdtemp(prefix="mailbox-actors-test-"))
        try:
            self.clock = FakeClock(start_ms)
            self._seed = seed
            self.rng = SeededRng(seed)
            if control:  # the control database, queues and webhook consumers, in the directory
                settings.setdefault("control_db", str(self.data_dir / "control.sqlite"))
                settings.setdefault("queues_db", str(self.data_dir / "queues.sqlite"))
            # Files open and close on the loop, in the scheduler's order: alarms due at one fake
            # instant run in one order every run (RT-12); a test of the threads sets it.
            settings.setdefault("file_threads", 0)
            self.settings = RuntimeSettings(data_dir=str(self.data_dir), **settings)
            self._inspector: Inspector | None = None
            self.node = Node(self.settings, clock=self.clock, rng=self.rng,
                             objects=self._errors.wrap(objects),
                             services=Services(_deterministic_dns(services, self.settings)),
                             peers=peers)
            self._event_sink = self.node.host.event_sink
            if wrap_event_sink is not None:
                # A test's sink around the node's own (one that fails or hangs), in place
                # before anything publishes.
                self.node.host.event_sink = wrap_event_sink(self._event_sink)
        except BaseException:
            self._remove_own_dir()  # a refused setting must not leave the directory behind
            raise

    async def __aenter__(self) -> TestRuntime:
        # Reopening a directory must not mint the ids of an earlier run again (same seed, same
        # fake time): each opening of a directory takes the next seed, deterministically.
        self.data_dir.mkdir(parents=True, exist_ok=True)
        runs_file = self.data_dir / ".testruntime-runs"
        text = runs_file.read_text().strip() if runs_file.exists() else ""
        runs = int(text) + 1 if text.isdigit() else 0
        staged = runs_file.with_suffix(".tmp")  # replaced whole: a kill never leaves it empty
        staged.write_text(str(runs))
        os.replace(staged, runs_file)
        self.rng.reseed(self._seed * 1_000_003 + runs)
        try:
            await self.node.start()
        except BaseException:
            self._remove_own_dir()
            raise
        self._started = True
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop the node (a graceful shutdown; its directory stays unless the runtime made it).
        Stopping twice is a no-op; reopen the directory with a new TestRuntime to restart."""
        if not self._started:
            return
        self._started = False
        await self.node.stop()
        self._remove_own_dir()

    def _require_started(self, what: str) -> None:
        if not self._started:
            raise NotStarted(
                f"TestRuntime.{what} needs a started runtime: use `async with TestRuntime(...) as "
                "rt:` (or the actor_runtime fixture of the pytest plugin) and call it inside")

    def _remove_own_dir(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    @property
    def events(self) -> RecordingEventSink:
        """Events published by outbox alarms (without ``control=True``)."""
        sink = self._event_sink
        if not isinstance(sink, RecordingEventSink):
            raise RuntimeError("with control=True events go to the control database and queues")
        return sink

    def now_ms(self) -> int:
        return self.clock.now_ms()

    async def advance(self, ms: int) -> None:
        """Move the fake clock forward, firing every alarm that comes due, in order. With
        ``raise_errors``, an alarm handler's exception is raised here once time has moved."""
        self._require_started("advance")
        seen = len(self._errors.alarms)
        await self.clock.advance(ms)
        self._raise_alarm_error(seen)

    async def run_until_idle(self) -> None:
        """Fire everything already due (alarms set for now, retries due now) without moving time."""
        self._require_started("run_until_idle")
        seen = len(self._errors.alarms)
        await self.clock.run_until_idle()
        self._raise_alarm_error(seen)

    def _raise_alarm_error(self, seen: int) -> None:
        if self.raise_errors and len(self._errors.alarms) > seen:
            raise self._errors.alarms[seen]

    async def fire_alarm_now(self, namespace: str, object_id: str) -> bool:
        """Run the actor's alarm handler now, whatever its scheduled time (Miniflare's
        ``runDurableObjectAlarm``); returns whether there was an alarm to run."""
        self._require_started("fire_alarm_now")
        seen = len(self._errors.alarms)
        ran = await self.node.fire_alarm_now(namespace, object_id)
        self._raise_alarm_error(seen)
        return ran

    async def call(self, namespace: str, object_id: str, req: Any, *,
                   reply_type: Any = None, **kw: Any) -> Any:
        """Call an actor with a request Struct or a dict (``{"op": ...}``); the ``ok`` value as
        plain JSON types, or decoded into ``reply_type`` (``True``: the namespace's reply type
        for the op) (TK-3). With ``raise_errors`` a handler's exception is raised here, with its
        traceback, instead of ``internal_error``."""
        self._require_started("call")
        if isinstance(req, dict):
            req = self._request_from_dict(namespace, req)
        rid = kw.pop("request_id", None) or self.node.ids.new_id("req")
        try:
            result = await self.node.call(namespace, object_id, req, request_id=rid, **kw)
        except MailboxActorsError as e:
            original = self._errors.take(rid, e)
            if self.raise_errors and original is not None:
                raise original from None
            raise
        if reply_type is None:
            return result
        if reply_type is True:
            reply_type = self._reply_type(namespace, req)
        return msgspec.convert(result, reply_type)

    def _request_from_dict(self, namespace: str, req: dict[str, Any]) -> Any:
        cls = self.node.host.actor_class(namespace)
        if cls is None:
            raise InvalidRequest(f"no namespace {namespace!r} here")
        try:
            return msgspec.convert(req, cls.requests)
        except msgspec.ValidationError as e:
            raise InvalidRequest(f"not a {namespace} request: {e}") from None

    def _reply_type(self, namespace: str, req: Any) -> Any:
        cls = self.node.host.actor_class(namespace)
        op = op_name(req)
        replies = getattr(cls, "replies", {}) if cls is not None else {}
        if op not in replies:
            raise KeyError(f"{namespace} declares no reply type for op {op!r}")
        return replies[op]

    async def call_bytes(self, namespace: str, object_id: str, body: bytes) -> bytes:
        self._require_started("call_bytes")
        return await self.node.call_bytes(namespace, object_id, body)

    def id_from_name(self, namespace: str, name: str) -> str:
        return self.node.id_from_name(namespace, name)

    async def wait_for_message(self, mailbox_id: str, *, tenant_id: str, identity_id: str,
                               timeout_ms: int = 30_000, step_ms: int = 100,
                               **filter: Any) -> dict[str, Any]:
        """Wait on the FakeClock for a message into an IdentityMailbox (IN-4): register a wait
        (``filter``: from_, to, subject_contains, header={"name","value"}, received_after_ms),
        then poll, advancing the clock ``step_ms`` at a time (firing what comes due) until it
        matches. Returns ``{"status":"matched","message_id","thread_id"}``; raises
        ``MailboxActorsError`` (``timeout``) once ``timeout_ms`` of fake time has passed."""
        ids = {"tenant_id": tenant_id, "identity_id": identity_id}
        wanted = msgspec.convert({("from" if k == "from_" else k): msgspec.to_builtins(v)
                                  for k, v in filter.items()}, WaitFilter)
        wait = await self.call("identity_mailbox", mailbox_id, RegisterWait(
            filter=wanted, expires_at_ms=self.now_ms() + timeout_ms), **ids)
        while True:
            got: dict[str, Any] = await self.call("identity_mailbox", mailbox_id,
                                                  WaitPoll(wait_id=wait["wait_id"]), **ids)
            if got["status"] == "matched":
                return got
            if got["status"] == "expired":
                raise MailboxActorsError(ErrorCode.TIMEOUT,
                                         f"no matching message within {timeout_ms} ms")
            await self.advance(step_ms)

    # ---- inside actors (TK-2) --------------------------------------------------------------

    async def run_in_actor(self, namespace: str, object_id: str,
                           fn: Callable[[Any, Any], T | Awaitable[T]]) -> T:
        """Run ``fn(instance, storage)`` inside the live actor, under its gates (Miniflare's
        ``runInDurableObject``); ``fn`` may be async. Returns what it returns; raises what it
        raises (the actor is not reset for it)."""
        self._require_started("run_in_actor")
        return await run_in_actor(self.node, namespace, object_id, fn)

    @property
    def inspect(self) -> Inspector:
        """Operator inspection of this node's actors (UI-1), the calls ``/admin/actors`` answers:
        ``overview()``, ``list_actors``, ``show_actor``, ``rows``, ``kv``, ``outbox``. Reading
        never activates an actor nor changes its file."""
        self._require_started("inspect")
        if self._inspector is None:
            self._inspector = Inspector(self.node)
        return self._inspector

    def list_ids(self, namespace: str) -> list[str]:
        """The ids of every object of ``namespace`` that exists (Miniflare's
        ``listDurableObjectIds``), sorted."""
        self._require_started("list_ids")
        return actor_ids_on_disk(self.node, namespace)

    async def get_alarm(self, namespace: str, object_id: str) -> int | None:
        """The actor's stored alarm (Unix ms), or None; from outside, even while it runs."""
        self._require_started("get_alarm")
        return stored_alarm(self.node, namespace, object_id)

    async def set_alarm(self, namespace: str, object_id: str, at_ms: int | None) -> None:
        """Set (or, with None, delete) the actor's alarm from outside, as its own code would."""
        def write(_actor: Any, storage: Any) -> None:
            if at_ms is None:
                storage.delete_alarm()
            else:
                storage.set_alarm(at_ms)
        await self.run_in_actor(namespace, object_id, write)


def _deterministic_dns(services: Mapping[ServiceKey[Any], Any] | None,
                       settings: RuntimeSettings) -> dict[ServiceKey[Any], Any]:
    """A test never asks the machine's DNS by accident: without a resolver of its own or
    ``dns`` settings naming nameservers (a ``LoopbackDns``), DomainMonitor gets a FakeResolver."""
    items = dict(services or {})
    if items.get(RESOLVER) is None and not settings.dns.nameservers:
        items[RESOLVER] = FakeResolver()
    return items
