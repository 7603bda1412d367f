"""IdentityMailbox's thread rows (IN-2, IN-11): a message's thread placed, threads merged, and
thread ids resolved to the one that survives a merge.

A merge never rewrites a message: ``messages.thread_id`` keeps the id it was given. The younger
thread's row gets ``merged_into`` (the survivor, always a thread that is not itself merged: a
merge into a thread that absorbed others re-points those too), its size moves to the survivor,
and a ``thread.merged`` event (ids only) is emitted. Reads resolve any id through ``resolve``
and gather a thread's messages over ``member_ids``; keys (``thread_keys``) keep pointing at the
thread they were mapped to and are resolved on look-up. The pure rules are
``core/inbound/threads.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from mailbox_actors.carrier.requests import stamped_ids
from mailbox_actors.core.inbound.threads import (
    ThreadDecision,
    ThreadKeys,
    assign_thread,
    rethread,
)
from mailbox_actors.platform.storage.sql import SqlStorage

__all__ = ["MEMBERS", "THREAD_MERGES", "Emit", "apply", "as_stamped", "decide", "regroup",
           "resolve"]

# Migration: merged threads point at their survivor (NULL for a thread that survives).
THREAD_MERGES = (
    "ALTER TABLE threads ADD COLUMN merged_into TEXT",
    "CREATE INDEX threads_merged ON threads (merged_into) WHERE merged_into IS NOT NULL",
)

Emit = Callable[[SqlStorage, str, dict[str, Any]], object]


class _Lookup:
    """``ThreadLookup`` over the transaction's rows: keys resolved through merges."""

    def __init__(self, tx: SqlStorage) -> None:
        self.tx = tx

    def thread_of(self, key: str) -> str | None:
        rows = self.tx.exec("SELECT COALESCE(t.merged_into, t.id) FROM thread_keys k "
                            "JOIN threads t ON t.id = k.thread_id WHERE k.key = ?", key).all()
        return str(rows[0][0]) if rows else None

    def size_of(self, thread_id: str) -> int:
        rows = self.tx.exec("SELECT size FROM threads WHERE id = ?", thread_id).all()
        return int(rows[0][0]) if rows else 0


def decide(tx: SqlStorage, keys: ThreadKeys, new_thread_id: str) -> ThreadDecision:
    """Inside the ingest transaction, before anything is written: the rules' decision."""
    return assign_thread(keys, _Lookup(tx), new_thread_id)


def regroup(tx: SqlStorage, keys: ThreadKeys, thread_id: str, emit: Emit) -> None:
    """Inside a reparse's transaction (IN-8): the message given ``thread_id`` has new keys; the
    threads they reach merge with its own as at an arrival with these keys (IN-11), nothing
    splits, and the keys are mapped."""
    current = resolve(tx, thread_id) or thread_id
    decision = rethread(keys, _Lookup(tx), current)
    apply(tx, decision, tx.now_ms(), emit, added=0)


def apply(tx: SqlStorage, decision: ThreadDecision, now: int, emit: Emit,
          added: int = 1) -> None:
    """Inside the same transaction: the thread created or grown by ``added`` messages (merged
    ones moved into it, each with its ``thread.merged`` event) and the message's keys mapped."""
    thread_id = decision.thread_id
    if decision.created:
        tx.exec("INSERT INTO threads (id, size, created_at_ms, last_at_ms) VALUES (?, 1, ?, ?)",
                thread_id, now, now)
    elif not decision.merged:
        if added:
            tx.exec("UPDATE threads SET size = size + ?, last_at_ms = ? WHERE id = ?", added,
                    now, thread_id)
    else:
        lookup = _Lookup(tx)
        moved = sum(lookup.size_of(m) for m in decision.merged)
        tx.exec("UPDATE threads SET size = size + ? + ?, last_at_ms = ? WHERE id = ?", added,
                moved, now, thread_id)
        for merged in decision.merged:
            tx.exec("UPDATE threads SET merged_into = ?, size = 0 "
                    "WHERE id = ? OR merged_into = ?", thread_id, merged, merged)
            emit(tx, "thread.merged", {"thread_id": thread_id, "merged_thread_id": merged})
    for key in decision.map_if_absent:
        tx.exec("INSERT OR IGNORE INTO thread_keys (key, thread_id) VALUES (?, ?)", key, thread_id)
    for key in decision.map_always:
        tx.exec("INSERT OR REPLACE INTO thread_keys (key, thread_id) VALUES (?, ?)", key,
                thread_id)


def as_stamped(tx: SqlStorage, keys: ThreadKeys) -> ThreadKeys:
    """CA-17: a reply quoting the Message-ID a provider gave one of this mailbox's Emails threads
    as one quoting the id the Email was stamped with (so replies quoting either meet)."""
    quoted = [k for k in (keys.in_reply_to, *keys.references) if k]
    stamped = stamped_ids(tx, quoted) if quoted else {}
    if not stamped:
        return keys
    irt = keys.in_reply_to
    return msgspec.structs.replace(keys, in_reply_to=stamped.get(irt, irt) if irt else None,
                                   references=tuple(stamped.get(r, r) for r in keys.references))


def resolve(sql: SqlStorage, thread_id: str) -> str | None:
    """The surviving id of a thread id (itself when not merged), or None when unknown."""
    rows = sql.exec("SELECT COALESCE(merged_into, id) FROM threads WHERE id = ?",
                    thread_id).all()
    return str(rows[0][0]) if rows else None


# A thread's messages, whichever of its ids they were given: bind the surviving id twice.
MEMBERS = "SELECT id FROM threads WHERE id = ? OR merged_into = ?"
