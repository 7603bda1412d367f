"""What may go on a queue (Q-1): queue names, delays and message bodies, checked before anything is stored.

A body is a JSON object with ``"v": 1`` and a string ``"kind"`` that carries ids and pointers; anything
else is refused with ``invalid_request`` naming what is wrong, and a body over 128 KB encoded with
``limit_exceeded``. Error messages name fields and types, never values that could be content.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from mailbox_actors.wire.errors import ErrorCode, LimitExceeded, MailboxActorsError

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_BODY_BYTES",
    "MAX_DELAY_SECONDS",
    "QUEUE_NAME_RE",
    "check_batch_size",
    "check_delay_ms",
    "check_queue_name",
    "encode_body",
]

QUEUE_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
MAX_BODY_BYTES = 131_072  # Cloudflare Queues' 128 KB per message
MAX_DELAY_SECONDS = 43_200  # Cloudflare Queues' 12 hours, for send and retry alike
MAX_BATCH_SIZE = 100  # Cloudflare Queues' largest max_batch_size
_MAX_DEPTH = 32
_PLAIN_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _invalid(message: str, **details: Any) -> MailboxActorsError:
    return MailboxActorsError(ErrorCode.INVALID_REQUEST, message, details=details or None)


def check_queue_name(name: object, *, what: str = "queue") -> str:
    if not isinstance(name, str) or not QUEUE_NAME_RE.match(name):
        shown = repr(name) if isinstance(name, str) and len(name) <= 80 else type(name).__name__
        raise _invalid(f"{what} name {shown} must match {QUEUE_NAME_RE.pattern}", field=what)
    return name


def check_delay_ms(delay_seconds: float) -> int:
    """``delay_seconds`` (0 to 12 hours) as whole milliseconds."""
    if (isinstance(delay_seconds, bool) or not isinstance(delay_seconds, int | float)
            or not math.isfinite(delay_seconds) or not 0 <= delay_seconds <= MAX_DELAY_SECONDS):
        raise _invalid(f"delay_seconds must be a number from 0 to {MAX_DELAY_SECONDS}",
                       field="delay_seconds")
    return round(delay_seconds * 1000)


def check_batch_size(max_batch_size: int) -> int:
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or not (
            1 <= max_batch_size <= MAX_BATCH_SIZE):
        raise _invalid(f"max_batch_size must be an integer from 1 to {MAX_BATCH_SIZE}",
                       field="max_batch_size")
    return max_batch_size


def _mapping_to_dict(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"{type(obj).__name__} is not a JSON type")


_encoder = msgspec.json.Encoder(enc_hook=_mapping_to_dict)


def encode_body(body: object, *, where: str = "body") -> tuple[bytes, str]:
    """The body's JSON and its kind, or ``invalid_request`` / ``limit_exceeded`` saying why not."""
    if not isinstance(body, Mapping):
        raise _invalid(f"queue {where} must be a JSON object (a mapping), not {type(body).__name__}",
                       field=where)
    if "v" not in body:
        raise _invalid(f'queue {where} has no "v": every body carries "v": 1', field=f"{where}.v")
    v = body["v"]
    if type(v) is not int or v != 1:
        shown = repr(v) if type(v) is int else f"a {type(v).__name__}"
        raise _invalid(f'queue {where} has "v" {shown}; only "v": 1 is understood',
                       field=f"{where}.v")
    if "kind" not in body:
        raise _invalid(f'queue {where} has no "kind": every body carries a string kind tag',
                       field=f"{where}.kind")
    kind = body["kind"]
    if not isinstance(kind, str) or not kind:
        raise _invalid(f'queue {where} "kind" must be a non-empty string, not {type(kind).__name__}',
                       field=f"{where}.kind")
    # Encode first: an oversized body is refused without walking it. msgspec accepts more than
    # JSON (bytes, sets, datetimes); the walk below refuses those so a body reads back as sent.
    try:
        data = _encoder.encode(body)
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        why = _json_problem(body, where, 0) or f"{where}: {type(exc).__name__}"
        raise _invalid(f"queue {where} is not JSON-serialisable: {why}", field=where) from None
    if len(data) > MAX_BODY_BYTES:
        raise LimitExceeded("queue_body_bytes", MAX_BODY_BYTES,
                            f"queue {where} is {len(data)} bytes encoded; the limit is "
                            f"{MAX_BODY_BYTES} (bodies carry ids and pointers, not content)")
    if not _plain_json(body, 0):
        problem = _json_problem(body, where, 0) or f"{where}: not plain JSON"
        raise _invalid(f"queue {where} is not JSON-serialisable: {problem}", field=where)
    return data, kind


def _plain_json(value: Any, depth: int) -> bool:
    """Whether ``value`` is plain JSON, as ``_json_problem`` decides it, without building the
    path of every value on the way (every body sent is walked; the path is needed only to say
    what is wrong with one that is not)."""
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if depth >= _MAX_DEPTH:
        return False
    if type(value) is dict or isinstance(value, Mapping):  # a dict skips the ABC's check
        for k, item in value.items():
            if not isinstance(k, str) or not (
                    item is None or type(item) is str or type(item) is int
                    or _plain_json(item, depth + 1)):
                return False
        return True
    if isinstance(value, list | tuple):
        for item in value:
            if not _plain_json(item, depth + 1):
                return False
        return True
    return False


def _json_problem(value: Any, path: str, depth: int) -> str | None:
    """Where ``value`` stops being plain JSON (str-keyed objects, lists, str, finite numbers,
    bools, null), or None. Keys that could be content are not echoed."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path}: {value!r} is not a JSON number"
    if depth >= _MAX_DEPTH:
        return f"{path}: nested deeper than {_MAX_DEPTH} levels"
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"{path}: an object key is a {type(k).__name__}; keys must be strings"
            sub = f"{path}.{k}" if _PLAIN_KEY_RE.match(k) else f"{path}[...]"
            problem = _json_problem(item, sub, depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{i}]", depth + 1)
            if problem is not None:
                return problem
        return None
    return f"{path}: {type(value).__name__} is not a JSON type"
