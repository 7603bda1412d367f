"""Threading (IN-2, IN-11) as pure decisions: which thread a received message joins, and which
threads it merges.

Keys are Message-IDs (without angle brackets) and, for Outlook mail that carries only
``Thread-Index``, the 22-byte root of that index (``ti:`` + base64). Each key maps to one thread.
In-Reply-To is trusted on its own; References join a thread; a subject never merges threads; a
parent that arrives after its reply finds its own id already mapped (by the reply) and joins that
thread; a thread holds at most ``max_size`` messages, then a new one starts. A decision never moves
a message or a key that is already mapped, so thread ids never change once given.

Threads do not depend on arrival order (IN-11): a message whose keys are mapped to more than one
thread links them, and they merge into the oldest (the smallest id: ids are ULIDs, so creation
order). A merged thread's id becomes an alias of the survivor; the caller resolves keys through
aliases (``ThreadLookup.thread_of`` answers surviving ids). After each message every key of every
message received so far resolves to that message's thread, so the threads are the connected
components of the messages' keys, whatever the order, as long as no merge would pass the cap
(the younger thread then stays apart).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

import msgspec

__all__ = ["MAX_THREAD_SIZE", "ThreadDecision", "ThreadKeys", "ThreadLookup", "assign_thread",
           "msg_ids", "rethread", "thread_keys"]

MAX_THREAD_SIZE = 100
MAX_REFERENCES = 100  # the newest ones: a References list longer than this is cut from the front
MAX_ID_CHARS = 250
_MSG_ID = re.compile(r"<([^<>\s]{1,250})>")


def msg_ids(value: str | None) -> list[str]:
    """The ``<...>`` tokens of a Message-ID, In-Reply-To or References value, in order, without
    brackets or repeats. Anything between tokens (comments, phrases) is ignored."""
    if not value:
        return []
    seen: dict[str, None] = {}
    for m in _MSG_ID.finditer(value):
        seen.setdefault(m.group(1), None)
    return list(seen)


class ThreadKeys(msgspec.Struct, frozen=True):
    """What threading reads of one message."""

    own: str | None  # its Message-ID, None when absent or not one
    in_reply_to: str | None
    references: tuple[str, ...]  # oldest first, as in the header
    thread_index_root: str | None  # "ti:<base64 of the first 22 bytes>"


def thread_keys(message_id: str | None, in_reply_to: str | None, references: str | None,
                thread_index_root: str | None = None) -> ThreadKeys:
    """Keys from the raw header values (any of them may be None or malformed)."""
    own = msg_ids(message_id)
    irt = msg_ids(in_reply_to)
    refs = [r for r in msg_ids(references) if r not in own][-MAX_REFERENCES:]
    return ThreadKeys(own=own[0] if own else None,
                      in_reply_to=next((r for r in irt if r not in own), None),
                      references=tuple(refs),
                      thread_index_root=thread_index_root)


class ThreadLookup(Protocol):
    """Implemented by the caller over its storage."""

    def thread_of(self, key: str) -> str | None:
        """The surviving thread a key (Message-ID or Thread-Index root) is mapped to (through
        any merge), or None."""

    def size_of(self, thread_id: str) -> int:
        """How many messages the surviving thread holds now (its merged threads' included)."""


class ThreadDecision(msgspec.Struct, frozen=True):
    thread_id: str
    created: bool  # a new thread: the caller inserts it
    # Keys to map to thread_id when they are not mapped yet (never remapped).
    map_if_absent: tuple[str, ...]
    # Keys to map to thread_id even if mapped (the message's own id: its replies follow it).
    map_always: tuple[str, ...]
    # Surviving threads that become aliases of thread_id (IN-11), oldest first; their sizes
    # move to thread_id.
    merged: tuple[str, ...] = ()


def _key_order(keys: ThreadKeys) -> list[str]:
    """A message's keys in the order of trust, without repeats."""
    key_order: list[str] = []
    if keys.in_reply_to is not None:
        key_order.append(keys.in_reply_to)
    if keys.own is not None:
        key_order.append(keys.own)
    key_order.extend(reversed(keys.references))
    if keys.thread_index_root is not None:
        key_order.append(keys.thread_index_root)
    return list(dict.fromkeys(key_order))


def _within_cap(base: str, total: int, others: Sequence[str], lookup: ThreadLookup,
                max_size: int) -> list[str]:
    """``base`` (holding ``total`` messages with the one being placed) and the ``others`` that
    merge with it: oldest first while the sum stays within ``max_size`` (IN-11)."""
    members = [base]
    for other in sorted(others):
        size = lookup.size_of(other)
        if total + size <= max_size:
            members.append(other)
            total += size
    return members


def assign_thread(keys: ThreadKeys, lookup: ThreadLookup, new_thread_id: str,
                  max_size: int = MAX_THREAD_SIZE) -> ThreadDecision:
    """Decide the thread of a message from its keys and what is already mapped.

    Order of trust: the In-Reply-To parent's thread; then a thread that a reply which arrived
    first gave this message's own id; then the nearest References ancestor that is mapped; then
    the Thread-Index root. A full thread is never joined: the message starts a new one. The
    other threads its keys reach merge with the one it joins (IN-11), oldest first while the
    sum stays within ``max_size``; the oldest of them survives and the message is given its id.
    """
    mapped = {k: lookup.thread_of(k) for k in _key_order(keys)}
    roots = list(dict.fromkeys(t for t in mapped.values() if t is not None))
    created = not roots or lookup.size_of(roots[0]) >= max_size
    members: list[str] = []
    if not created:
        members = _within_cap(roots[0], lookup.size_of(roots[0]) + 1, roots[1:], lookup,
                              max_size)
    thread_id = new_thread_id if created else min(members)
    ancestors: Sequence[str] = [*keys.references,
                                *([keys.in_reply_to] if keys.in_reply_to else [])]
    absent = [a for a in dict.fromkeys(ancestors) if mapped.get(a) is None]
    if keys.thread_index_root is not None and (
            created or mapped.get(keys.thread_index_root) is None):
        # A new Outlook conversation's root, or a thread past its size: later replies follow.
        absent_or_moved = keys.thread_index_root
    else:
        absent_or_moved = None
    always = tuple(k for k in (keys.own, absent_or_moved) if k is not None)
    return ThreadDecision(thread_id=thread_id, created=created,
                          map_if_absent=tuple(a for a in absent if a not in always),
                          map_always=always,
                          merged=tuple(sorted(m for m in members if m != thread_id)))


def rethread(keys: ThreadKeys, lookup: ThreadLookup, current: str,
             max_size: int = MAX_THREAD_SIZE) -> ThreadDecision:
    """IN-8 with IN-11: a message already in the surviving thread ``current`` is read again and
    has new ``keys``. It stays where it is (ids never change, a thread never splits); every other
    thread its new keys reach merges with ``current`` as it would have had the message arrived
    with these keys (oldest first within ``max_size``; the oldest survives); the keys nothing
    holds yet, and its own id, are mapped to the survivor. The message is counted already."""
    mapped = {k: lookup.thread_of(k) for k in _key_order(keys)}
    others = {t for t in mapped.values() if t is not None and t != current}
    members = _within_cap(current, lookup.size_of(current), list(others), lookup, max_size)
    thread_id = min(members)
    always = (keys.own,) if keys.own is not None else ()
    return ThreadDecision(thread_id=thread_id, created=False,
                          map_if_absent=tuple(k for k, t in mapped.items()
                                              if t is None and k not in always),
                          map_always=always,
                          merged=tuple(sorted(m for m in members if m != thread_id)))
