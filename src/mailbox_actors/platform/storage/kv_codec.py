"""How a KV value is stored (RT-15): its Python type survives the round trip.

MessagePack (msgspec) with three extension types for what MessagePack would otherwise flatten:
tuples (else lists), datetimes (naive or aware, with their offset) and ints past 64 bits. Every
value written starts with a zero byte, which JSON text never does, so values of the earlier
format (JSON) are still read as they were written.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from mailbox_actors.wire.errors import InvalidRequest

__all__ = ["decode_value", "encode_value"]

_FORMAT = b"\x00"
_TUPLE, _DATETIME, _BIGINT = 1, 2, 3
_INT64 = range(-(1 << 63), 1 << 64)


def _pack(value: Any) -> Any:
    """Replace what MessagePack cannot keep apart by extension values, recursively."""
    if value is None or isinstance(value, (bool, str, float, bytes)):
        return value
    if isinstance(value, int):
        return value if value in _INT64 else msgspec.msgpack.Ext(_BIGINT, str(value).encode())
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dt.datetime):
        return msgspec.msgpack.Ext(_DATETIME, value.isoformat().encode())
    if isinstance(value, tuple):
        return msgspec.msgpack.Ext(_TUPLE, _ENCODER.encode([_pack(v) for v in value]))
    if isinstance(value, list):
        return [_pack(v) for v in value]
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise InvalidRequest(f"KV dict keys are str or int, not {type(k).__name__}",
                                     details={"value_type": type(k).__name__})
        return {k: _pack(v) for k, v in value.items()}
    raise InvalidRequest(
        f"a KV value of type {type(value).__name__} cannot be stored (bytes, str, int, float, bool, "
        "None, list, dict, tuple and datetime can)", details={"value_type": type(value).__name__})


def _ext(code: int, data: memoryview) -> Any:
    if code == _TUPLE:
        return tuple(_DECODER.decode(data))
    if code == _DATETIME:
        return dt.datetime.fromisoformat(bytes(data).decode())
    if code == _BIGINT:
        return int(bytes(data).decode())
    raise ValueError(f"unknown KV extension type {code}")


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(ext_hook=_ext)


def encode_value(value: Any) -> bytes:
    return _FORMAT + _ENCODER.encode(_pack(value))


def decode_value(data: bytes) -> Any:
    if data[:1] == _FORMAT:
        return _DECODER.decode(memoryview(data)[1:])
    return msgspec.json.decode(data)  # the earlier format
