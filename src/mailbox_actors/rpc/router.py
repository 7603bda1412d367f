"""The router (RPC-1..RPC-6, RPC-9): bytes in, bytes out, for every namespace of a node.

It validates the namespace and the object id, decodes the envelope with the namespace's one
decoder, hands the request to the host (which applies queue, gate, deadline and owner checks), and
encodes ``{"ok": ...}`` or ``{"err": ...}``. It never answers with a stack trace: anything
unexpected is logged with the request id and becomes ``internal_error``.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, cast

import anyio
import anyio.lowlevel
import msgspec

from mailbox_actors.core.actor_ids import NAMESPACE_RE, check_id, id_from_name, id_from_random
from mailbox_actors.core.actor_ids import namespace_key as derive_namespace_key
from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.logging import bound_context, get_logger
from mailbox_actors.platform.rng import Rng
from mailbox_actors.platform.services import Services
from mailbox_actors.rpc.deadlines import (
    DEFAULT_DEADLINE_MS,
    LONG_DEADLINE_MS,
    LONG_OPS,
    default_deadline_ms,
)
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.classes import DeferredActor
from mailbox_actors.runtime.host import ActorHost, AlarmSinks, MetricsSink
from mailbox_actors.runtime.outbox import EventsDays, EventSink
from mailbox_actors.runtime.scope import bound_request_id, current_scope
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.envelope import ENVELOPE_VERSION, Envelope, RpcReply, VersionProbe
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError

__all__ = ["DEFAULT_DEADLINE_MS", "LONG_DEADLINE_MS", "LONG_OPS", "Namespace", "Router",
           "default_deadline_ms"]

_ENC = msgspec.json.Encoder()
_PROBE = msgspec.json.Decoder(VersionProbe)
_REPLY = msgspec.json.Decoder(RpcReply)
_PATH = re.compile(r"at `(\$[^`]*)`")


_OP_NAMES: dict[type, str] = {}


def op_name(req: Any) -> str:
    """The request's op (its Struct tag); kept per type, as ``__struct_config__`` is built anew
    at every read."""
    op = _OP_NAMES.get(type(req))
    if op is None:
        op = _OP_NAMES[type(req)] = str(type(req).__struct_config__.tag)
    return op


class Namespace:
    """One namespace of a node: its actor class, id key and envelope decoder."""

    __slots__ = ("cls", "decoder", "key", "name", "ok_labels", "ops", "verified")

    def __init__(self, cls: type[Actor], key: bytes) -> None:
        self.name = cls.namespace
        self.cls = cls
        self.key = key
        # Ids whose HMAC was checked: a hot actor's calls skip the digest (bounded, cleared when
        # full; an id's validity never changes under one key).
        self.verified: set[str] = set()
        self.decoder: msgspec.json.Decoder[Envelope[Any]] = msgspec.json.Decoder(
            Envelope[cls.requests])  # type: ignore[name-defined]
        self.ops = tuple(sorted(str(t.__struct_config__.tag) for t in _union_members(cls.requests)))
        # rpc_requests_total's labels of a successful call, per request type: made once, not
        # at every call.
        self.ok_labels: dict[type, tuple[tuple[str, str], ...]] = {}


_VERIFIED_MAX = 10_000


def _check_id(ns: Namespace, object_id: object) -> None:
    """Raise ``invalid_request`` unless ``object_id`` is an id of ``ns`` (RT-1)."""
    if isinstance(object_id, str) and object_id in ns.verified:
        return
    reason = check_id(ns.key, object_id)
    if reason is not None:
        raise InvalidRequest(reason)
    if len(ns.verified) >= _VERIFIED_MAX:
        ns.verified.clear()
    ns.verified.add(cast(str, object_id))  # check_id passed: a str


def _union_members(tp: Any) -> tuple[Any, ...]:
    return tuple(getattr(tp, "__args__", (tp,)))


class Placement(Protocol):
    """Where an object id lives in the cluster (RPC-9): an in-process call for an id another
    node owns goes there (the node's ``Forwarding``)."""

    def elsewhere(self, namespace: str, object_id: str) -> int | None:
        """The owning node's index when it is not this node; None when the id lives here."""

    async def send(self, owner: int, namespace: str, object_id: str, body: bytes) -> bytes:
        """The envelope sent to node ``owner``; its reply bytes."""


class Router:
    """The node's front door. It makes the host it delivers to, handing it ``call`` for the calls
    actors make to each other (so that they take the same path as every other call)."""

    def __init__(self, settings: RuntimeSettings, *, ids: Ids, clock: Clock, rng: Rng,
                 metrics: MetricsSink, alarm_sinks: AlarmSinks, event_sink: EventSink,
                 events_days: EventsDays, services: Services | None = None,
                 placement: Placement | None = None) -> None:
        self.ids = ids
        self.clock = clock
        self.rng = rng
        self.metrics = metrics
        self._secret = settings.id_secret.encode()
        self._ns: dict[str, Namespace] = {}
        self._calls = 0
        self.log = get_logger("mailbox_actors.rpc")
        # Where an in-process call's envelope goes: this node's own call path, unless the
        # cluster places the id on another node (RPC-9: in-process when it lives here).
        self._placement = placement
        self.host = ActorHost(settings, clock=clock, rng=rng, ids=ids, metrics=metrics,
                              alarm_sinks=alarm_sinks, call=self.call, event_sink=event_sink,
                              events_days=events_days, services=services)

    # ---- namespaces and ids (RT-1) ---------------------------------------------------------

    def namespace_key(self, name: str) -> bytes:
        return derive_namespace_key(name, self._secret)

    def register(self, cls: type[Actor] | DeferredActor) -> None:
        """Serve ``cls``; a ``DeferredActor`` is imported at its namespace's first request (its
        ids, keys and files are known before: they need only its name)."""
        if not NAMESPACE_RE.match(cls.namespace):
            raise ValueError(f"namespace {cls.namespace!r} must match {NAMESPACE_RE.pattern}")
        self._ns.pop(cls.namespace, None)
        self.host.register(cls, self.namespace_key(cls.namespace))
        if not isinstance(cls, DeferredActor):
            self._load(cls.namespace)

    def _load(self, name: str) -> Namespace:
        """The namespace's class (imported now if it was deferred) and its envelope decoder."""
        cls = self.host.actor_class(name)
        assert cls is not None, f"{name} is not registered"
        ns = self._ns[name] = Namespace(cls, self.host.paths.keys[name])
        ns.verified = self.host.paths.verified[name]  # one check per id, door or file
        return ns

    def namespace(self, name: str) -> Namespace:
        """A registered namespace, its class loaded; ``invalid_request`` for any other name."""
        ns = self._ns.get(name)
        if ns is None:
            self._key(name)  # unknown: raises
            ns = self._load(name)
        return ns

    def _key(self, name: str) -> bytes:
        key = self.host.paths.keys.get(name) if isinstance(name, str) else None
        if key is None:
            raise InvalidRequest(
                f"unknown namespace; known: {', '.join(sorted(self.host.paths.keys))}",
                details={"namespace": name[:64] if isinstance(name, str) else None})
        return key

    def id_from_name(self, namespace: str, name: str) -> str:
        if not isinstance(name, str) or not 1 <= len(name) <= 1024:
            raise InvalidRequest("an object name is a string of 1 to 1024 characters")
        return id_from_name(self._key(namespace), name)

    def new_unique_id(self, namespace: str) -> str:
        return id_from_random(self._key(namespace), self.rng.random_bytes(16))

    def id_from_string(self, namespace: str, s: str) -> str:
        self._key(namespace)  # unknown: raises
        self.host.paths.check(namespace, s)
        return s

    # ---- the call path ---------------------------------------------------------------------

    async def call_bytes(self, namespace: str, object_id: str, body: bytes) -> bytes:
        """The whole RPC: decode, route, check, run, encode. Never raises for bad input."""
        request_id: str | None = None
        op = "?"
        code = "ok"
        labels = None
        try:
            ns = self._ns.get(namespace) or self.namespace(namespace)
            if object_id not in ns.verified:  # _check_id's own first test, without the call
                _check_id(ns, object_id)
            try:
                env = ns.decoder.decode(body)
            except (msgspec.DecodeError, RecursionError) as e:
                raise self._decode_error(ns, body, e) from e
            request_id = env.request_id
            req = env.req
            op = _OP_NAMES.get(type(req)) or op_name(req)
            if env.v != ENVELOPE_VERSION:
                raise MailboxActorsError(ErrorCode.UNSUPPORTED_VERSION,
                                         f"envelope version {env.v} is not supported; send 1")
            if env.actor_key_id is not None:
                result = await self._audited(ns, object_id, env, req, op)
            else:
                result = await self.host.deliver(ns.cls, object_id, env, req)
            out = _ENC.encode({"ok": result})
            labels = ns.ok_labels.get(type(req))
            if labels is None:
                labels = ns.ok_labels[type(req)] = (("namespace", namespace), ("op", op),
                                                    ("code", code))
        except MailboxActorsError as e:
            code = e.code.value
            # Every answer carries a req_ id, minted here when the envelope had none (RT-12).
            out = _ENC.encode({"err": e.to_body(request_id or self.ids.new_id("req"))})
        except Exception as e:
            code = ErrorCode.INTERNAL_ERROR.value
            self.log.exception("rpc_internal_error", namespace=namespace, op=op,
                               request_id=request_id, error=type(e).__name__)
            out = _ENC.encode({"err": MailboxActorsError(
                ErrorCode.INTERNAL_ERROR, "internal error; the request id is logged"
            ).to_body(request_id or self.ids.new_id("req"))})
        if labels is None:
            labels = (("namespace", namespace if self.has_namespace(namespace) else "?"),
                      ("op", op),
                      ("code", code))
        self.metrics.inc("rpc_requests_total", labels)
        self._calls += 1
        if not self._calls & 31:
            # A tight loop of in-process calls never suspends otherwise; let other tasks (alarms,
            # sockets) run now and then, at a cost spread over 32 calls.
            await anyio.lowlevel.checkpoint()
        return out

    async def _audited(self, ns: Namespace, object_id: str, env: Envelope[Any], req: Any,
                       op: str) -> Any:
        """A call that carries an ``actor_key_id`` (seed section 5: "for audit"): every log line
        it writes carries the key id, and one ``rpc_audit`` line records who did what, where and
        how it ended (ids and codes only: never content)."""
        code = "ok"
        with bound_context(actor_key_id=env.actor_key_id):
            try:
                return await self.host.deliver(ns.cls, object_id, env, req)
            except MailboxActorsError as e:
                code = e.code.value
                raise
            except Exception:
                code = ErrorCode.INTERNAL_ERROR.value
                raise
            finally:
                self.log.info("rpc_audit", namespace=ns.name, op=op, object_id=object_id,
                              tenant_id=env.tenant_id, identity_id=env.identity_id,
                              request_id=env.request_id, code=code)

    def has_namespace(self, name: str) -> bool:
        """Whether ``name`` is served here (its class need not be imported yet)."""
        return name in self.host.paths.keys

    async def call_envelope(self, namespace: str, object_id: str, env: Envelope[Any]) -> Any:
        """An envelope this process built, for an actor this node owns (the SMTP door): the path
        of ``call_bytes`` after its decode (the id checked, the host's checks, the request
        counted), without the envelope's bytes either way. Returns the handler's result as it
        returned it; raises ``MailboxActorsError`` (anything else becomes ``internal_error``)."""
        ns = self._ns.get(namespace) or self.namespace(namespace)
        _check_id(ns, object_id)
        op = op_name(env.req)
        code = "ok"
        try:
            return await self.host.deliver(ns.cls, object_id, env, env.req)
        except MailboxActorsError as e:
            code = e.code.value
            raise
        except Exception as e:
            code = ErrorCode.INTERNAL_ERROR.value
            self.log.exception("rpc_internal_error", namespace=namespace, op=op,
                               request_id=env.request_id, error=type(e).__name__)
            raise MailboxActorsError(ErrorCode.INTERNAL_ERROR,
                                     "internal error; the request id is logged") from None
        finally:
            self.metrics.inc("rpc_requests_total", (("namespace", namespace), ("op", op),
                                                    ("code", code)))

    @staticmethod
    def _decode_error(ns: Namespace, body: bytes, e: Exception) -> MailboxActorsError:
        """What a body the namespace's decoder refused is answered: ``unsupported_version`` for
        another envelope version, else ``invalid_request`` with the failing path."""
        if isinstance(e, RecursionError):
            return InvalidRequest("body is nested too deeply", details={"path": "$"})
        if not isinstance(e, msgspec.ValidationError):
            return InvalidRequest(f"body is not valid JSON: {e}", details={"path": "$"})
        try:
            v = _PROBE.decode(body).v
        except (msgspec.DecodeError, RecursionError):
            v = ENVELOPE_VERSION
        if v != ENVELOPE_VERSION and not (isinstance(v, bool)):
            return MailboxActorsError(ErrorCode.UNSUPPORTED_VERSION,
                                      "envelope version is not supported; send 1",
                                      details={"path": "$.v"})
        m = _PATH.search(str(e))
        return InvalidRequest(str(e), details={"path": m.group(1) if m else "$",
                                               "ops": list(ns.ops)})

    async def call(self, namespace: str, object_id: str, req: Any, *,
                   tenant_id: str | None = None, identity_id: str | None = None,
                   deadline_ms: int | None = None, request_id: str | None = None,
                   actor_key_id: str | None = None) -> Any:
        """In-process call through the same envelope bytes; returns the ``ok`` value as plain
        JSON types or raises ``MailboxActorsError``. Inside an actor (a request or an alarm run),
        the request id and deadline of its scope carry over (RPC-9, RT-12)."""
        scope = current_scope()
        if deadline_ms is None:
            deadline_ms = scope.deadline_ms if scope is not None else None
            if deadline_ms is None:
                deadline_ms = self.clock.now_ms() + default_deadline_ms(op_name(req))
        if request_id is None:
            # A scope's id; else one a host service's work was given (a queue or webhook
            # delivery binds its own: RT-12); else a new one.
            request_id = scope.request_id if scope is not None else (
                bound_request_id() or self.ids.new_id("req"))
        env = Envelope(v=ENVELOPE_VERSION, tenant_id=tenant_id, identity_id=identity_id,
                       request_id=request_id,
                       actor_key_id=actor_key_id, deadline_ms=deadline_ms, req=req)
        body = _ENC.encode(env)
        placement = self._placement
        owner = None if placement is None else placement.elsewhere(namespace, object_id)
        if placement is None or owner is None:
            out = await self.call_bytes(namespace, object_id, body)
        else:
            out = await placement.send(owner, namespace, object_id, body)
        reply = _REPLY.decode(out)
        if reply.err is not None:
            raise MailboxActorsError.from_body(reply.err)
        return reply.ok
