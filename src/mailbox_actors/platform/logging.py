"""The runtime's log lines (CL-5, OPS-11): JSON lines off a terminal, readable lines on one.

A line is a dict (timestamp, level, event, the logger's name, the task's request id and bound
context, the call's keys) that ``refuse_content`` scrubs and msgspec writes as one JSON line: a
node off a terminal imports no logging library (structlog's ``__init__`` imports its console
renderer, and with it rich, pygments and colorama where installed; issue 28, ADR 0022). On a
terminal the line is rendered by structlog's ``ConsoleRenderer``, imported then. A program that
configures structlog itself gets the runtime's lines through its own chain instead.

``refuse_content`` must never let a message body, subject, attachment or clear-text address out:
addresses leave only as ``addr:`` + HMAC-SHA256(hash key, address)[:16 hex]. Never route logs
through the stdlib ``logging`` module and never log content to correlate it.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, TextIO

import msgspec

__all__ = [
    "LEVELS",
    "LOG_REQUEST_ID",
    "REFUSED",
    "Logger",
    "bind_request",
    "bound_context",
    "bound_request_id",
    "configure_logging",
    "get_logger",
    "hash_address",
    "refuse_content",
    "reset_logging",
]

REFUSED = "[refused]"

# Level names accepted by configure_logging, with the stdlib's (and structlog's) numbers.
LEVELS: Mapping[str, int] = {
    "debug": 10,
    "info": 20,
    "warning": 30,
    "error": 40,
    "critical": 50,
}

# Keys whose values are message content whatever they hold (compared lower-cased).
_CONTENT_KEYS = frozenset(
    {"body", "text", "html", "subject", "content", "attachment", "attachments", "raw", "headers"}
)

# Deliberately generous: a false positive costs a hashed token in a log line, a false negative leaks
# an address. Quoted local parts, Unicode (EAI) addresses, dotless and IP-literal domains all count.
_ADDRESS_RE = re.compile(
    r"""(?:"[^"\r\n]*"|[\w.!#$%&'*+/=?^`{|}~-]+)"""
    r"""@(?:\[[^\]\s]+\]|[\w-]+(?:\.[\w-]+)*)"""
)

# Nested structures deeper than this are refused rather than walked (and a cycle cannot hang us).
_MAX_DEPTH = 8

# The request id of the request, alarm run or delivery this task serves (RT-12): on every line,
# as ``str()`` of what this holds. The request scope (runtime/scope.py) sets it directly, once
# per request, to itself (its ``str`` is its id, an alarm run's minted at its first read); a
# queue delivery sets a ``str``.
LOG_REQUEST_ID: ContextVar[object] = ContextVar("mailbox_actors_log_request_id", default=None)
# Other keys bound for a block of this task (``bound_context``): an audited call's actor_key_id.
_bound: ContextVar[Mapping[str, Any]] = ContextVar("mailbox_actors_log_context",
                                                   default=MappingProxyType({}))


def hash_address(key: bytes, address: str) -> str:
    """HMAC-SHA256(key, trimmed lower-cased address), first 16 hex digits: correlatable, not
    reversible."""
    import hashlib  # at the first address hashed: a start that logs none never needs it
    import hmac

    normalised = address.strip().lower().encode("utf-8")
    return hmac.new(key, normalised, hashlib.sha256).hexdigest()[:16]


Renderer = Callable[[Any, str, dict[str, Any]], str]


class _State:
    """What configure_logging chose; module-level so every logger sees a reconfigure."""

    def __init__(self) -> None:
        # Until configure_logging is given a key, addresses are hashed under a per-process random
        # key: still never in clear, only not correlatable across processes.
        self.hash_key = os.urandom(32)
        self.stream: TextIO | None = None
        self.min_level = LEVELS["info"]
        self.json: bool | None = None  # None: JSON unless the stream is a terminal, at first line
        self.renderer: Renderer | None = None  # chosen at the first line written
        self.lock = threading.Lock()  # one line at a time, whichever thread logs it


_state = _State()


def _scrub_str(s: str) -> str:
    if "@" not in s:  # the common case costs one scan
        return s
    key = _state.hash_key
    return _ADDRESS_RE.sub(lambda m: "addr:" + hash_address(key, m.group(0)), s)


def _scrub(value: Any, depth: int) -> Any:
    # Returns only JSON-native values, so the renderer never falls back to repr() of an object
    # whose repr might carry content.
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _scrub_str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        # Raw bytes in a mail system are most likely message content.
        return REFUSED
    if depth >= _MAX_DEPTH:
        return REFUSED
    if isinstance(value, Mapping):
        return {
            _scrub_str(str(k)): REFUSED if str(k).lower() in _CONTENT_KEYS
            else _scrub(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_scrub(v, depth + 1) for v in value]
    return _scrub_str(str(value))


def refuse_content(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Content keys become ``[refused]``, addresses become ``addr:<hash>``; also a structlog
    processor, for a program that configures structlog itself."""
    for k in list(event_dict):
        key = k
        if "@" in k:  # an address used as a key (log.info("x", **per_recipient)) is still one
            key = _scrub_str(k)
            event_dict[key] = event_dict.pop(k)
        value = event_dict[key]
        event_dict[key] = REFUSED if key.lower() in _CONTENT_KEYS else _scrub(value, 0)
    return event_dict


_json_encoder = msgspec.json.Encoder(enc_hook=str)


def _render_json(_logger: Any, _method: str, event_dict: dict[str, Any]) -> str:
    return _json_encoder.encode(event_dict).decode("utf-8")


def _console_renderer(colors: bool) -> Renderer:
    """structlog's readable lines, for a terminal: only then is structlog (and what its console
    renderer imports) loaded."""
    import structlog.dev

    # plain_traceback, because the default (rich, when installed) prints frame locals, and
    # locals hold message bodies; our lines reach it with the traceback already a scrubbed string.
    return structlog.dev.ConsoleRenderer(colors=colors,
                                         exception_formatter=structlog.dev.plain_traceback)


def _stream() -> TextIO:
    # Resolved per line, not at configure time: pytest swaps sys.stderr between tests.
    return _state.stream if _state.stream is not None else sys.stderr


def _renderer() -> Renderer:
    renderer = _state.renderer
    if renderer is None:
        tty = _stream().isatty()
        use_json = (not tty) if _state.json is None else _state.json
        renderer = _state.renderer = _render_json if use_json else _console_renderer(tty)
    return renderer


def configure_logging(
    *,
    json: bool | None = None,
    level: str = "info",
    stream: TextIO | None = None,
    hash_key: bytes | None = None,
) -> None:
    """Configure the runtime's logs for the process; safe to call again (tests do, with a
    StringIO). It takes over from a structlog configuration made before it.

    ``json=None`` chooses JSON lines unless the stream is a terminal. ``stream`` defaults to
    ``sys.stderr`` (stdout is for the command line's own output). ``hash_key`` keys the address
    hashes; without one the key in use is kept (at first, a random per-process key).
    """
    try:
        min_level = LEVELS[level.lower()]
    except KeyError:
        raise ValueError(
            f"log level {level!r} is not one of {', '.join(LEVELS)}"
        ) from None
    if hash_key is not None:
        if not hash_key:
            raise ValueError("hash_key must not be empty")
        _state.hash_key = bytes(hash_key)
    _state.stream = stream
    _state.min_level = min_level
    _state.json = json
    _state.renderer = None
    if stream is not None or json is not None:
        _renderer()  # chosen now when it can be: a terminal's renderer is imported at start
    structlog = sys.modules.get("structlog")
    if structlog is not None and structlog.is_configured():
        structlog.reset_defaults()  # this configuration wins over one made before it


def reset_logging() -> None:
    """Back to the defaults: standard error, info, JSON unless a terminal (test isolation)."""
    configure_logging()
    _bound.set(MappingProxyType({}))
    LOG_REQUEST_ID.set(None)


class Logger:
    """A named logger with bound keys (``bind``): structlog's filtering bound logger's methods,
    each a no-op below the configured level."""

    __slots__ = ("_context", "_name")

    def __init__(self, name: str | None, context: Mapping[str, Any]) -> None:
        self._name = name
        self._context = context

    def bind(self, **kw: Any) -> Logger:
        return Logger(self._name, {**self._context, **kw})

    def new(self, **kw: Any) -> Logger:
        return Logger(self._name, kw)

    def unbind(self, *keys: str) -> Logger:
        context = dict(self._context)
        for key in keys:
            del context[key]
        return Logger(self._name, context)

    def try_unbind(self, *keys: str) -> Logger:
        return Logger(self._name, {k: v for k, v in self._context.items() if k not in keys})

    def debug(self, event: str, *args: Any, **kw: Any) -> None:
        if _state.min_level <= 10:
            self._emit("debug", "debug", event, args, kw)

    def info(self, event: str, *args: Any, **kw: Any) -> None:
        if _state.min_level <= 20:
            self._emit("info", "info", event, args, kw)

    msg = info

    def warning(self, event: str, *args: Any, **kw: Any) -> None:
        if _state.min_level <= 30:
            self._emit("warning", "warning", event, args, kw)

    warn = warning

    def error(self, event: str, *args: Any, **kw: Any) -> None:
        if _state.min_level <= 40:
            self._emit("error", "error", event, args, kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> None:
        if _state.min_level <= 40:
            kw.setdefault("exc_info", True)
            self._emit("exception", "error", event, args, kw)

    def critical(self, event: str, *args: Any, **kw: Any) -> None:
        if _state.min_level <= 50:
            self._emit("critical", "critical", event, args, kw)

    fatal = critical

    def log(self, level: int, event: str, *args: Any, **kw: Any) -> None:
        if level >= _state.min_level:
            name = next((n for n, v in LEVELS.items() if v >= level), "critical")
            self._emit(name, name, event, args, kw)

    def _emit(self, method: str, level: str, event: str, args: tuple[Any, ...],
              kw: dict[str, Any]) -> None:
        if args:
            event = event % args
        structlog = sys.modules.get("structlog")
        if structlog is not None and structlog.is_configured():
            self._through_structlog(structlog, method, event, kw)
            return
        line: dict[str, Any] = {
            "timestamp": datetime.now(tz=UTC).isoformat().replace("+00:00", "Z"),
            "level": level, "event": event}
        if self._name is not None:
            line["logger"] = self._name
        request_id = LOG_REQUEST_ID.get()
        if request_id is not None:
            line["request_id"] = str(request_id)
        line.update(_bound.get())
        line.update(self._context)
        exc_info = kw.pop("exc_info", None)
        stack_info = kw.pop("stack_info", False)
        line.update(kw)
        if stack_info:
            import traceback

            line["stack"] = "".join(traceback.format_stack()[:-2]).rstrip("\n")
        if exc_info:
            formatted = _format_exception(exc_info)
            if formatted:
                line["exception"] = formatted
        text = _renderer()(None, level, refuse_content(None, level, line)) + "\n"
        out = _stream()
        with _state.lock:
            out.write(text)
            out.flush()

    def _through_structlog(self, structlog: Any, method: str, event: str,
                           kw: dict[str, Any]) -> None:
        """A program (or a test's ``capture_logs``) configured structlog: its chain decides."""
        logger = structlog.get_logger(logger_name=self._name) if self._name \
            else structlog.get_logger()
        request_id = LOG_REQUEST_ID.get()
        extra = {"request_id": str(request_id)} if request_id is not None else {}
        getattr(logger, method)(event, **{**extra, **_bound.get(), **self._context, **kw})


def _format_exception(exc_info: Any) -> str:
    import traceback  # only for a line that carries one

    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    elif not isinstance(exc_info, tuple):
        exc_info = sys.exc_info()
    if exc_info[0] is None:
        return ""
    # The frames and the exception's type, never its text: a handler's exception may quote a
    # subject, a body or an address (the privacy rule), so it is not logged.
    lines = ["Traceback (most recent call last):\n", *traceback.format_tb(exc_info[2]),
             f"{exc_info[0].__qualname__} (its text is not logged: it may quote content)"]
    return "".join(lines).rstrip("\n")


def get_logger(name: str | None = None) -> Logger:
    """A logger that follows configure_logging, even when made before it (at import time)."""
    return Logger(name, {})


def bound_request_id() -> str | None:
    """The request id this task's log lines carry, or None."""
    request_id = LOG_REQUEST_ID.get()
    return None if request_id is None else str(request_id)


@contextmanager
def bind_request(request_id: str) -> Iterator[None]:
    """Put ``request_id`` on every log line written inside the block (RT-12), in this task only."""
    token = LOG_REQUEST_ID.set(request_id)
    try:
        yield
    finally:
        LOG_REQUEST_ID.reset(token)


@contextmanager
def bound_context(**kw: Any) -> Iterator[None]:
    """Put ``kw`` on every log line written inside the block, in this task only."""
    token = _bound.set({**_bound.get(), **kw})
    try:
        yield
    finally:
        _bound.reset(token)
