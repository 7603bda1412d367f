"""Log configuration (CL-5): structlog, JSON lines off a terminal, readable lines on one.

Owns the processor chain every log line goes through, including ``refuse_content``, which must never
let a message body, subject, attachment or clear-text address out: addresses leave only as
``addr:`` + HMAC-SHA256(hash key, address)[:16 hex]. Never route logs through the stdlib ``logging``
module (structlog's filtering bound logger is the fast path) and never log content to correlate it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sys
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO, cast

import msgspec
import structlog
from structlog.contextvars import bound_contextvars, merge_contextvars
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

__all__ = [
    "LEVELS",
    "REFUSED",
    "bind_request",
    "configure_logging",
    "get_logger",
    "hash_address",
    "refuse_content",
    "reset_logging",
]

REFUSED = "[refused]"

# Level names accepted by configure_logging, with structlog's (stdlib-compatible) numbers.
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


def hash_address(key: bytes, address: str) -> str:
    """HMAC-SHA256(key, trimmed lower-cased address), first 16 hex digits: correlatable, not
    reversible."""
    normalised = address.strip().lower().encode("utf-8")
    return hmac.new(key, normalised, hashlib.sha256).hexdigest()[:16]


class _State:
    """What configure_logging changed; module-level so the processor and sink can see it."""

    def __init__(self) -> None:
        # Until configure_logging is given a key, addresses are hashed under a per-process random
        # key: still never in clear, only not correlatable across processes.
        self.hash_key = secrets.token_bytes(32)
        self.stream: TextIO | None = None


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


def refuse_content(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: content keys become ``[refused]``, addresses become ``addr:<hash>``."""
    for k in list(event_dict):
        key = k
        if "@" in k:  # an address used as a key (log.info("x", **per_recipient)) is still one
            key = _scrub_str(k)
            event_dict[key] = event_dict.pop(k)
        value = event_dict[key]
        event_dict[key] = REFUSED if key.lower() in _CONTENT_KEYS else _scrub(value, 0)
    return event_dict


_json_encoder = msgspec.json.Encoder(enc_hook=str)


def _render_json(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> str:
    # timestamp, level and event first, so a line reads well in `tail -f` before any tooling.
    head = {k: event_dict.pop(k) for k in ("timestamp", "level", "event") if k in event_dict}
    head.update(event_dict)
    return _json_encoder.encode(head).decode("utf-8")


class _Sink:
    """The one file every logger writes to; re-pointed by configure_logging.

    Loggers cached by structlog keep their file object, so they hold this indirection rather than a
    stream, and a reconfigure (a test's fresh StringIO) reaches every logger already handed out.
    """

    def _target(self) -> TextIO:
        # Resolved per write, not at configure time: pytest swaps sys.stderr between tests.
        return _state.stream if _state.stream is not None else sys.stderr

    def write(self, s: str) -> int:
        return self._target().write(s)

    def flush(self) -> None:
        self._target().flush()


_sink = _Sink()
_logger_factory = structlog.WriteLoggerFactory(file=cast(TextIO, _sink))
# The same list object is handed to every logger and edited in place on reconfigure, so even
# loggers built by structlog.get_logger directly pick up the new renderer and hash key.
_processors: list[Processor] = []
_wrapper_classes: dict[int, type[FilteringBoundLogger]] = {}
_proxies: weakref.WeakSet[Any] = weakref.WeakSet()


def configure_logging(
    *,
    json: bool | None = None,
    level: str = "info",
    stream: TextIO | None = None,
    hash_key: bytes | None = None,
) -> None:
    """Configure structlog for the process; safe to call again (tests do, with a StringIO).

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
    tty = (stream if stream is not None else sys.stderr).isatty()
    use_json = (not tty) if json is None else json

    renderer: Processor
    if use_json:
        renderer = _render_json
    else:
        # plain_traceback, because the default (rich, when installed) prints frame locals, and
        # locals hold message bodies.
        renderer = structlog.dev.ConsoleRenderer(
            colors=tty, exception_formatter=structlog.dev.plain_traceback
        )
    _processors[:] = [
        merge_contextvars,
        _standard_keys,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        # Tracebacks become a string before refuse_content runs, so exception messages are
        # scrubbed like everything else.
        structlog.processors.format_exc_info,
        refuse_content,
        renderer,
    ]
    wrapper = _wrapper_classes.get(min_level)
    if wrapper is None:
        wrapper = _wrapper_classes[min_level] = structlog.make_filtering_bound_logger(min_level)
    structlog.configure(
        processors=_processors,
        wrapper_class=wrapper,
        logger_factory=_logger_factory,
        context_class=dict,
        cache_logger_on_first_use=True,
    )
    # A cached logger keeps the wrapper class (the level) it was built with; dropping the cache
    # of the loggers we handed out makes a new level reach them too.
    for proxy in list(_proxies):
        vars(proxy).pop("bind", None)


def reset_logging() -> None:
    """Back to the library's default (below), dropping every cached logger (test isolation)."""
    structlog.reset_defaults()
    for proxy in list(_proxies):
        vars(proxy).pop("bind", None)
    configure_logging()


def _standard_keys(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog's standard key for the logger's name is ``logger`` (``add_logger_name``)."""
    name = event_dict.pop("logger_name", None)
    if name is not None:
        event_dict.setdefault("logger", name)
    return event_dict


def get_logger(name: str | None = None) -> FilteringBoundLogger:
    """A logger that follows configure_logging, even when called before it (at import time)."""
    proxy = structlog.get_logger(logger_name=name) if name else structlog.get_logger()
    _proxies.add(proxy)
    return cast(FilteringBoundLogger, proxy)


@contextmanager
def bind_request(request_id: str) -> Iterator[None]:
    """Put ``request_id`` on every log line written inside the block (RT-12), in this task only."""
    with bound_contextvars(request_id=request_id):
        yield


# OPS-11: a program that embeds the runtime and never configures structlog still gets its lines on
# standard error, scrubbed (structlog's own default prints to standard output, unscrubbed). A
# program that configured structlog before importing us keeps its configuration; one that does
# after, replaces this.
if not structlog.is_configured():
    configure_logging()
