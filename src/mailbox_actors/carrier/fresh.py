"""The queued Emails no dispatch has looked at yet, found without an index (CA-1, CA-4).

A submitted Email is ``fresh`` (its column is 1): queued, due at once, unseen by dispatch. Fresh
Emails are left out of the queued index (``emails_queued`` holds the queued Emails whose
``fresh`` is NULL: delayed, retried, or stored before this layout), so a submit writes one b-tree
less. Dispatch finds them through the Emails' own key instead, from a bound (``FreshFrom``) below
which no Email is fresh. An Email stops being fresh, for good, when its dispatch intent commits
(``dispatch_rows``) or it is delayed (``quota_gate``, ``can_send`` failing: it is then in the
index, due later); one that ends while fresh (cancelled, expired, superseded) is no longer
queued. Every new Email takes a ``seq`` above all others, so the bound only ever grows: each look
starts where the last one found the first fresh Email (or past the newest, when none was).

The bound lives in the mailbox instance, read from its one-row table ``email_fresh_from`` when
first needed and written back there when a dispatch run re-arms. One read from an earlier run (or lost with a
rolled-back transaction) is still a bound: the next look walks further, no further wrong.
"""

from __future__ import annotations

from typing import Any

from mailbox_actors.carrier import store
from mailbox_actors.carrier.store import EmailRow
from mailbox_actors.platform.storage.sql import SqlStorage

__all__ = ["FreshFrom"]

_FRESH = "seq >= ? AND fresh = 1 AND status = 'queued'"
_INDEXED = ("status = 'queued' AND fresh IS NULL AND next_attempt_at_ms <= ? "
            "ORDER BY next_attempt_at_ms, email_id LIMIT ?")


class FreshFrom:
    """One mailbox instance's bound: no fresh Email has a ``seq`` below ``bound()``."""

    __slots__ = ("_seq", "_stored")

    def __init__(self) -> None:
        self._seq: int | None = None
        self._stored: int | None = None

    def bound(self, sql: SqlStorage) -> int:
        if self._seq is None:
            rows = sql.exec("SELECT seq FROM email_fresh_from WHERE id = 1").all()
            self._seq = self._stored = int(rows[0][0]) if rows else 0
        return self._seq

    def _passed(self, seq: int) -> None:
        if self._seq is None or seq > self._seq:
            self._seq = seq

    def due(self, sql: SqlStorage, now: int, limit: int
            ) -> list[tuple[EmailRow, bytes | None]]:
        """The queued Emails due at ``now``, fresh or indexed, in due order (then id), at most
        ``limit``, each with its inline content when small (``rows_and_content_where``)."""
        start = self.bound(sql)
        fresh = store.rows_and_content_where(sql, f"{_FRESH} ORDER BY seq LIMIT ?", start, limit)
        if fresh:
            self._passed(fresh[0][0].seq)
        else:  # none: an Email submitted from now on takes a seq above the newest
            self._passed(sql.exec("SELECT coalesce(max(seq), 0) + 1 FROM emails").one()[0])
        rows = [r for r in fresh if _due(r[0], now)]  # a clock set back: not yet
        indexed = store.rows_and_content_where(sql, _INDEXED, now, limit)
        if indexed:  # both kinds: in due order (fresh ones alone are in seq order, due order)
            rows = sorted(rows + indexed, key=_order)
        return rows[:limit]

    def next_due(self, sql: SqlStorage) -> int | None:
        """The earliest due time of any queued Email (None: none is queued)."""
        times = [sql.exec("SELECT min(next_attempt_at_ms) FROM emails WHERE status = 'queued' "
                          "AND fresh IS NULL").one()[0],
                 sql.exec(f"SELECT min(next_attempt_at_ms) FROM emails WHERE {_FRESH}",
                          self.bound(sql)).one()[0]]
        known = [t for t in times if t is not None]
        return min(known) if known else None

    def delay(self, tx: SqlStorage, until: int) -> None:
        """Every queued Email due now waits until ``until`` (the fresh ones go to the index)."""
        now = tx.now_ms()
        tx.exec("UPDATE emails SET next_attempt_at_ms = ? WHERE status = 'queued' AND "
                "fresh IS NULL AND next_attempt_at_ms <= ?", until, now)
        tx.exec(f"UPDATE emails SET next_attempt_at_ms = ?, fresh = NULL WHERE {_FRESH} AND "
                "next_attempt_at_ms <= ?", until, self.bound(tx), now)

    def store(self, tx: SqlStorage) -> None:
        """Inside a dispatch run's last transaction: the bound, for the next instance."""
        if self._seq is not None and self._seq != self._stored:
            tx.exec("INSERT OR REPLACE INTO email_fresh_from (id, seq) VALUES (1, ?)", self._seq)
            self._stored = self._seq


def _due(row: EmailRow, now: int) -> bool:
    return row.next_attempt_at_ms is not None and row.next_attempt_at_ms <= now


def _order(r: tuple[EmailRow, Any]) -> tuple[int, str]:
    return (r[0].next_attempt_at_ms or 0, r[0].email_id)
