"""The synchronous key-value API over an actor's own file (RT-6): JSON values, string keys.

It stores in the runtime's ``_ma_kv`` table through the storage's runtime-only statements, so it
shares the actor's transactions, implicit commits and output gate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from mailbox_actors.wire.errors import LimitExceeded

if TYPE_CHECKING:
    from mailbox_actors.platform.storage.sql import SqlStorage

__all__ = ["KvStorage"]


class KvStorage:
    """A synchronous key-value API over the same file (RT-6): JSON values, string keys."""

    _MAX_KEY = 2048

    def __init__(self, sql: SqlStorage) -> None:
        self._sql = sql

    def _key(self, key: object) -> str:
        if not isinstance(key, str):
            raise TypeError("KV keys are strings")
        if len(key.encode()) > self._MAX_KEY:
            raise LimitExceeded("max_key_bytes", self._MAX_KEY, "KV key longer than 2048 bytes")
        return key

    def get(self, key: str) -> Any:
        row = self._sql.sys_exec("SELECT v FROM _ma_kv WHERE k = ?", (self._key(key),)).fetchone()
        return None if row is None else msgspec.json.decode(row[0])

    def put(self, key: str, value: Any) -> None:
        data = msgspec.json.encode(value)
        if len(data) > self._sql.limits.max_value_bytes:
            raise LimitExceeded("max_value_bytes", self._sql.limits.max_value_bytes,
                                "KV value larger than the value limit")
        self._sql.sys_exec("INSERT OR REPLACE INTO _ma_kv (k, v) VALUES (?, ?)",
                           (self._key(key), data))

    def delete(self, key: str) -> bool:
        cur = self._sql.sys_exec("DELETE FROM _ma_kv WHERE k = ?", (self._key(key),))
        return cur.rowcount > 0

    def list(self, *, prefix: str | None = None, start: str | None = None,
             end: str | None = None, limit: int | None = None,
             reverse: bool = False) -> dict[str, Any]:
        """Keys in order (``start`` inclusive, ``end`` exclusive), optionally under ``prefix``."""
        where, params = [], []
        if prefix:
            where.append("k >= ? AND k < ?")
            params += [prefix, prefix + "\U0010ffff"]
        if start is not None:
            where.append("k >= ?")
            params.append(start)
        if end is not None:
            where.append("k < ?")
            params.append(end)
        q = "SELECT k, v FROM _ma_kv"
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY k DESC" if reverse else " ORDER BY k"
        if limit is not None:
            if limit < 0:
                raise ValueError("limit must be >= 0")
            q += f" LIMIT {int(limit)}"
        return {k: msgspec.json.decode(v) for k, v in self._sql.sys_exec(q, params)}
