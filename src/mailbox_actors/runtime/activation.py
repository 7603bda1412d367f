"""One live actor on the host's side (RT-2, RT-8, RT-10): its file opened, its meta read, its
migrations applied, its context and object made, and the counters the host schedules it by.

Opening builds everything in one order, each part handed what it needs when it is made: the
storage (told the request scope and the alarm scheduler), the owner, the input gate, the context,
then the object. What all activations of a class share is made once (``Opener``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.storage.fence import SLOT_FENCE
from mailbox_actors.platform.storage.hooks import AlarmSink, TransactionHooks
from mailbox_actors.platform.storage.known import (
    SOURCE_KEY,
    KnownSchema,
    facts_for,
    schema_source,
)
from mailbox_actors.platform.storage.opening import (
    Connected,
    OpenedAhead,
    SchemaLayout,
    fresh_layout,
    open_actor_storage,
)
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.platform.storage.sql import RUNTIME_SCHEMA_VERSION, SqlStorage
from mailbox_actors.runtime import outbox
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.context import ActorContext, ActorEnv
from mailbox_actors.runtime.gates import InputGate
from mailbox_actors.runtime.migrations import SCHEMA_VERSION_KEY, apply_migrations
from mailbox_actors.runtime.owner import OWNER_META_KEYS, Owner, OwnerRules
from mailbox_actors.runtime.settings import RuntimeSettings

__all__ = ["META_KEYS", "Activation", "Key", "Opener"]

Key = tuple[str, str]
# the runtime meta an activation reads (in the file's first statement)
META_KEYS = (SCHEMA_VERSION_KEY, *OWNER_META_KEYS, SOURCE_KEY)
# id of a class's migrations -> (them, the namespace, their schema's fingerprint per version,
# the newest schema as its files carry it). Not keyed by the class: a class made per runtime
# (TestRuntime's wrappers) would be kept alive, and with it whatever it refers to.
_SOURCES: dict[int, tuple[object, str, tuple[str, ...], KnownSchema]] = {}


def _sources(cls: type[Actor[Any]]) -> tuple[tuple[str, ...], KnownSchema]:
    """``known.schema_source`` of each version of ``cls``'s migrations, 0 (none) included, and
    the newest one as a file of it carries it."""
    migrations = cls.migrations
    kept = _SOURCES.get(id(migrations))
    if kept is not None and kept[0] is migrations and kept[1] == cls.namespace:
        return kept[2], kept[3]
    steps = [m.statements for m in migrations]
    found = tuple(schema_source(cls.namespace, RUNTIME_SCHEMA_VERSION, steps[:v])
                  for v in range(len(steps) + 1))
    newest = KnownSchema(SCHEMA_VERSION_KEY, str(len(steps)), found[-1])
    if len(_SOURCES) < 1024:
        _SOURCES[id(migrations)] = (migrations, cls.namespace, found, newest)
    return found, newest


# A version's fingerprint -> the layout a new file of it has (``opening.fresh_layout``), made for
# the files an open brings from an earlier runtime schema (their fingerprints are of it).
_FRESH: dict[str, SchemaLayout | None] = {}


def _as_fresh(storage: RuntimeStorage, cls: type[Actor[Any]], current: int, source: str) -> bool:
    """The file has exactly the layout a new file of its class has at version ``current``."""
    if source not in _FRESH:
        layout = fresh_layout([s for m in cls.migrations[:current] for s in m.statements])
        if len(_FRESH) >= 256:
            _FRESH.clear()
        _FRESH[source] = layout
    expected = _FRESH[source]
    return expected is not None and storage.schema_layout() == expected


def _migrate(storage: RuntimeStorage, cls: type[Actor[Any]], meta: dict[str, str],
             sources: tuple[str, ...]) -> int:
    """The class's pending migrations applied; returns the version. A file whose schema is its
    migrations' alone (made by this open, or carrying the fingerprint of its version) keeps that
    record, in the migrations' transaction, and its storage learns its schema is a known one
    (``known``); any other file is screened statement by statement. A file this open upgraded
    from an earlier runtime schema carries a fingerprint of that layout: it is known again when
    its schema is exactly a new file's of its version (compared once, at the upgrade)."""
    current = int(meta.get(SCHEMA_VERSION_KEY, "0"))
    sql = storage.sql
    alone = sql.made if current == 0 else (
        current < len(sources) and meta.get(SOURCE_KEY) == sources[current])
    if not alone and sql.upgraded and 0 < current < len(sources):
        alone = _as_fresh(storage, cls, current, sources[current])
    version = apply_migrations(storage, cls.migrations, current,
                               (SOURCE_KEY, sources[-1]) if alone else None)
    if sql.upgraded:
        sql.transaction_sync(lambda tx: _upgraded(storage, tx, alone and version == current,
                                                  sources[version]))
    if alone:
        sql.know_schema(facts_for(sources[version]))
    return version


def _upgraded(storage: RuntimeStorage, tx: SqlStorage, stamp: bool, source: str) -> None:
    """After the open upgraded the file's runtime schema: its fingerprint recorded when no
    migration ran to record it (``stamp``), and its dispatched events pruned a day from now, as
    the object's own maintenance did before the runtime took the outbox over (EV-4)."""
    if stamp:
        storage.put_meta(SOURCE_KEY, source)
    if tx.exec("SELECT 1 FROM outbox WHERE dispatched_at IS NOT NULL LIMIT 1").all():
        outbox.prune_later(storage, tx.now_ms())


class Activation:
    """A live actor: its object, context, storage, gate and owner, and what the host counts."""

    __slots__ = ("actor", "alarm_only", "alarm_running", "closed", "cls", "ctx", "gate", "id",
                 "key", "last_used_ms", "namespace", "owner", "pending", "runtime_storage",
                 "starting")

    def __init__(self, opener: Opener, key: Key, storage: RuntimeStorage, owner: Owner,
                 gate: InputGate, ctx: ActorContext) -> None:
        self.cls = opener.cls
        self.namespace = key[0]
        self.id = key[1]
        self.key = key  # the host's own tuple, not another one
        self.runtime_storage = storage
        self.owner = owner
        self.gate = gate
        self.ctx = ctx
        self.actor = opener.cls(ctx)
        self.pending = 0  # requests and alarm runs admitted and not finished (RT-10)
        self.alarm_running = False
        self.closed = False
        # Opened for an alarm and no request admitted since (the host closes such an actor after
        # its run while other alarms wait: ``ActorHost.fire_alarm``).
        self.alarm_only = False
        self.last_used_ms = 0
        self.starting = opener.starts  # its start hook is to run

    async def started(self) -> None:
        """Run the actor's ``on_start`` once, under its input gate, before anything else reaches
        it (the constructor + ``blockConcurrencyWhile`` pattern, RT-16). If it raises, the
        activation is reset and the next request starts a fresh one."""
        if self.starting:
            self.starting = False
            await self.gate.hold(self.actor.on_start, None)

    @property
    def storage(self) -> SqlStorage:
        """The storage as the actor's code sees it (for tests that look inside an actor)."""
        return self.ctx.storage

    def scheduled(self) -> dict[str, int]:
        """The actor's alarm purposes and when each is due."""
        return self.ctx.scheduled()

    @property
    def idle(self) -> bool:
        return self.pending == 0 and not self.alarm_running and not self.gate.closed


class Opener:
    """What every activation of one class on one host is opened with, made at the class's first
    activation: the storage's settings, the schema's fingerprints, the owner's rules, the
    context's environment. An activation then passes only what is its own (key, file, alarm
    sink), so opening an actor builds its few objects and little else."""

    __slots__ = ("_clock", "_env", "_fence", "_hooks", "_now_ms", "_on_reset", "_settings", "cls",
                 "namespace", "newest", "owner_rules", "sources", "starts")

    def __init__(self, cls: type[Actor[Any]], settings: RuntimeSettings, clock: Clock,
                 hooks: TransactionHooks, env: ActorEnv, metrics: Any, log: Any,
                 on_reset: Callable[[Key], None]) -> None:
        self.cls = cls
        self.namespace = cls.namespace
        self.sources, self.newest = _sources(cls)
        self.owner_rules = OwnerRules(cls.owner_kind, cls.namespace, cls.not_found, metrics, log)
        self.starts = cls.on_start is not Actor.on_start
        self._settings = settings
        self._clock = clock
        self._now_ms = clock.now_ms  # one bound method for every storage, not one each
        self._hooks = hooks
        self._env = env
        self._fence = env.services.get(SLOT_FENCE)  # on many machines: the slot's (CL-11)
        # Drops an activation whose ``block_concurrency_while`` failed, given its key (its gate
        # calls it so): one callable for the class, not one made per actor.
        self._on_reset = on_reset

    def open(self, key: Key, path: str | Path, create: bool, alarm_sink: AlarmSink,
             ahead: OpenedAhead | None = None,
             alarm: bool = True, shed: bool = True,
             connected: Connected | None = None) -> Activation | None:
        """Open the actor's file and build its activation (None: no such object and not
        ``create``). Whatever fails after the file opened closes it again. ``ahead``: the file's
        connection made ahead (``opening.connect_ahead``, with ``META_KEYS``); ``connected``: the
        open's first step made (``opening.connect_recovered``). ``alarm``: read
        the stored alarm now (an alarm's activation); a request's reads it at its first use.
        ``shed``: free what opening left cached now (False: the caller sheds it later, if the
        actor stays open: ``ActorHost.fire_alarm``)."""
        settings = self._settings
        clock = self._clock
        object_id = key[1]
        opened = open_actor_storage(path, create=create, durability=settings.durability,
                                    limits=settings.limits, now_ms=self._now_ms,
                                    hooks=self._hooks, alarm_sink=alarm_sink,
                                    meta_keys=META_KEYS, ahead=ahead, alarm=alarm,
                                    known=self.newest, connected=connected)
        if opened is None:
            return None
        sql, meta = opened  # the meta keys come with the file's first read
        if self._fence is not None:
            sql._fence = self._fence
        storage = RuntimeStorage(sql)
        try:
            owner = Owner(meta, object_id, self.owner_rules)
            # A file known to be of the newest schema has no migration pending (``KnownSchema``).
            sources = self.sources
            version = len(sources) - 1 if storage.schema_known else \
                _migrate(storage, self.cls, meta, sources)
            gate = InputGate(clock, self._on_reset, key, settings.block_concurrency_timeout_ms)
            ctx = ActorContext(namespace=self.namespace, object_id=object_id, storage=storage,
                               owner=owner, gate=gate, schema_version=version, env=self._env)
            act = Activation(self, key, storage, owner, gate, ctx)
            if shed and (ahead is None or not storage.schema_known):
                # The meta, migration and alarm reads are done. A connection made ahead shed
                # its caches in its thread, and only a migration would have read since.
                storage.shed_caches()
            return act
        except BaseException:
            storage.close()
            raise
