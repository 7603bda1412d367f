"""The synchronous key-value API over an actor's own file (RT-6, RT-15), as Durable Objects'
storage API: values keep their type, one key or up to 128 per call, ``list`` with ``start_after``,
``delete_all``.

It stores in the runtime's ``_ma_kv`` table through the storage's runtime-only statements, so it
shares the actor's transactions, implicit commits and output gate. Values are encoded by ``kv_codec``
(bytes stay bytes, tuples tuples, datetimes datetimes); values written as JSON by the earlier
format are still read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, overload

from mailbox_actors.platform.storage.kv_codec import decode_value, encode_value
from mailbox_actors.wire.errors import InvalidRequest, LimitExceeded

__all__ = ["MAX_KEYS_PER_CALL", "KvStorage"]

MAX_KEYS_PER_CALL = 128  # Durable Objects' limit for get/put/delete of several keys


class KvStorage:
    """``get``/``put``/``delete`` of one key or a batch, ``list``, ``delete_all`` (RT-15)."""

    def __init__(self, runtime_exec: Callable[[str, Sequence[Any]], sqlite3.Cursor],
                 transaction_sync: Callable[[Callable[[Any], Any]], Any],
                 max_value_bytes: int, delete_all: Callable[[], None]) -> None:
        """``runtime_exec`` runs a statement on the runtime's own tables inside the actor's
        transactions (the storage's); ``transaction_sync`` and ``delete_all`` are the actor's own."""
        self._exec = runtime_exec
        self._transaction_sync = transaction_sync
        self._max_value_bytes = max_value_bytes
        self._delete_all = delete_all

    # ---- validation ------------------------------------------------------------------------

    def _key(self, key: object) -> str:
        if not isinstance(key, str):
            raise InvalidRequest(f"KV keys are strings, not {type(key).__name__}",
                                 details={"key_type": type(key).__name__})
        return key

    def _batch(self, keys: Iterable[object]) -> list[str]:
        batch = [self._key(k) for k in keys]
        if len(batch) > MAX_KEYS_PER_CALL:
            raise LimitExceeded("max_kv_keys_per_call", MAX_KEYS_PER_CALL,
                                f"{len(batch)} keys in one call; the limit is {MAX_KEYS_PER_CALL}")
        return batch

    def _entry(self, key: object, value: Any) -> tuple[str, bytes]:
        k = self._key(key)
        data = encode_value(value)
        maximum = self._max_value_bytes
        size = len(k.encode()) + len(data)
        if size > maximum:
            raise LimitExceeded("max_value_bytes", maximum,
                                f"KV key plus value is {size} bytes; the limit is {maximum}")
        return k, data

    # ---- get / put / delete ----------------------------------------------------------------

    @overload
    def get(self, key: str) -> Any: ...
    @overload
    def get(self, key: list[str] | tuple[str, ...]) -> dict[str, Any]: ...

    def get(self, key: str | list[str] | tuple[str, ...]) -> Any:
        """One key's value (None when absent), or a dict of the keys found among up to 128."""
        if isinstance(key, (list, tuple)):
            batch = self._batch(key)
            if not batch:
                return {}
            marks = ", ".join("?" * len(batch))
            found = dict(self._exec(f"SELECT k, v FROM _ma_kv WHERE k IN ({marks})",
                                            batch).fetchall())
            return {k: decode_value(found[k]) for k in sorted(set(batch)) if k in found}
        row = self._exec("SELECT v FROM _ma_kv WHERE k = ?", (self._key(key),)).fetchone()
        return None if row is None else decode_value(row[0])

    @overload
    def put(self, key: str, value: Any) -> None: ...
    @overload
    def put(self, key: Mapping[str, Any]) -> None: ...

    def put(self, key: str | Mapping[str, Any], value: Any = None) -> None:
        """Store one value, or every entry of a dict of up to 128 (all or none of them)."""
        if isinstance(key, Mapping):
            self._batch(key.keys())
            entries = [self._entry(k, v) for k, v in key.items()]  # all checked before any write
            self._write_all(lambda tx: [tx._runtime_exec(
                "INSERT OR REPLACE INTO _ma_kv (k, v) VALUES (?, ?)", e) for e in entries])
            return
        self._exec("INSERT OR REPLACE INTO _ma_kv (k, v) VALUES (?, ?)", self._entry(key, value))

    @overload
    def delete(self, key: str) -> bool: ...
    @overload
    def delete(self, key: list[str] | tuple[str, ...]) -> int: ...

    def delete(self, key: str | list[str] | tuple[str, ...]) -> bool | int:
        """Delete one key (whether it existed) or up to 128 (how many existed)."""
        if isinstance(key, (list, tuple)):
            batch = sorted(set(self._batch(key)))
            if not batch:
                return 0
            marks = ", ".join("?" * len(batch))
            cur = self._exec(f"DELETE FROM _ma_kv WHERE k IN ({marks})", batch)
            return int(cur.rowcount)
        cur = self._exec("DELETE FROM _ma_kv WHERE k = ?", (self._key(key),))
        return cur.rowcount > 0

    def _write_all(self, fn: Any) -> None:
        self._transaction_sync(fn)

    # ---- list ------------------------------------------------------------------------------

    def list(self, *, prefix: str | None = None, start: str | None = None,
             start_after: str | None = None, end: str | None = None, limit: int | None = None,
             reverse: bool = False) -> dict[str, Any]:
        """Entries in key order (``start`` inclusive or ``start_after`` exclusive, ``end``
        exclusive, only keys under ``prefix``), at most ``limit``, last first when ``reverse``."""
        if start is not None and start_after is not None:
            raise InvalidRequest("list takes start or start_after, not both",
                                 details={"argument": "start_after"})
        for name, bound in (("prefix", prefix), ("start", start), ("start_after", start_after),
                            ("end", end)):
            if bound is not None and not isinstance(bound, str):
                raise InvalidRequest(f"list's {name} is a string", details={"argument": name})
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise InvalidRequest("list's limit is a positive int", details={"argument": "limit"})
        where: list[str] = []
        params: list[Any] = []
        if prefix:
            where.append("k >= ? AND substr(k, 1, ?) = ?")  # the range lets the key index help
            params += [prefix, len(prefix), prefix]
        for op, bound in ((">=", start), (">", start_after), ("<", end)):
            if bound is not None:
                where.append(f"k {op} ?")
                params.append(bound)
        q = "SELECT k, v FROM _ma_kv"
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY k DESC" if reverse else " ORDER BY k"
        if limit is not None:
            q += " LIMIT ?"
            params.append(limit)
        return {k: decode_value(v) for k, v in self._exec(q, params)}

    # ---- delete_all ------------------------------------------------------------------------

    def delete_all(self) -> None:
        """Remove all of the actor's storage: every key, every table of its own, its alarm and
        the runtime's record of it (RT-15). The file itself goes once the actor is idle."""
        self._delete_all()
