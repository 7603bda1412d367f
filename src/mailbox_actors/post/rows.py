"""What the three Post stores share (on an actor's file, the control database and PostgreSQL):
one row layout, so one reading of it.

The record's SELECT and its row as a ``PostRecord``; a ``CHAIN`` row as a job not started yet;
an envelope's digest and key check; a page of dead letters; a settlement's values in ``SETTLE``'s
order; and the claim round's bounds. Each store keeps only what its engine says differently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec

from mailbox_actors.core.post.rules import JobState, Settlement, canonical_json
from mailbox_actors.post.executor import Claimed
from mailbox_actors.post.routes import Route, Routes
from mailbox_actors.wire.errors import InvalidRequest
from mailbox_actors.wire.post import DeadLetterPage, PostRecord

__all__ = ["CHAIN", "RECORD_SQL", "ROUND_ADDRESSES", "check_key", "check_page_limit", "claimed_of",
           "dead_letter_page", "digest", "envelope_values", "record_of", "settle_values"]

ROUND_ADDRESSES = 64   # addresses claimed per round
CHAIN = 32             # jobs of one address sent one after another in a round
_MAX_KEY = 200
_DICT = msgspec.json.Decoder(dict[str, Any])
_ENC = msgspec.json.Encoder()

# The columns ``record_of`` reads; each store adds its WHERE with its engine's placeholders.
RECORD_SQL = (
    "SELECT j.key, e.route, j.state, j.attempts, j.seq, e.address, e.event, e.prepared, "
    "j.next_attempt_at_ms, j.reason, j.receipt FROM post_jobs j JOIN post_envelopes e "
    "ON e.key = j.key")


def record_of(row: Any) -> PostRecord:
    pending = row[2] in ("queued", "failed")
    return PostRecord(key=row[0], route=row[1], state=row[2], attempts=row[3], seq=row[4],
                      address=_DICT.decode(row[5]), event=_DICT.decode(row[6]),
                      prepared=_DICT.decode(row[7]) if row[7] else None,
                      next_attempt_at_ms=row[8] if pending else None, reason=row[9],
                      receipt=_DICT.decode(row[10]) if row[10] else None)


def claimed_of(r: Any, routes: Routes, lease_until_ms: int) -> Claimed:
    """A ``CHAIN`` row (SQLite's or PostgreSQL's: the same columns) as a job not started yet."""
    route = routes.get(r[2])
    return Claimed(seq=r[0], key=r[1], route=r[2], kind=r[3], producer=r[4], namespace=r[5],
                   object_name=r[6], tenant_id=r[7], identity_id=r[8], address=r[9].encode(),
                   event=r[10].encode(), prepared=r[11].encode() if r[11] else None,
                   attempts=r[12], lease_until_ms=lease_until_ms, runs=r[16], started=False,
                   needs_preparation=route is not None and route.prepare is not None)


def digest(route: str, address: dict[str, Any], event: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json([route, address, event])).hexdigest()


def check_key(key: object) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= _MAX_KEY:
        raise InvalidRequest(f"a Post key is a string of 1 to {_MAX_KEY} characters")
    return key


def check_page_limit(limit: int) -> int:
    if not 1 <= limit <= 64:
        raise InvalidRequest("limit is 1 to 64")
    return limit


def dead_letter_page(rows: Sequence[Any], limit: int) -> DeadLetterPage:
    """The dead letters among ``rows`` (at most ``limit`` records in key order); the cursor
    continues after the last row read, so a page may hold no letter and still continue."""
    return DeadLetterPage(letters=[record_of(r) for r in rows if r[2] == JobState.DEAD],
                          next_cursor=rows[-1][0] if len(rows) == limit else None)


def settle_values(job: Claimed, s: Settlement, now: int) -> tuple[Any, ...]:
    """``SETTLE``'s values: state, next attempt, reason, receipt (JSON), now, the job's seq."""
    receipt = None if s.receipt is None else _ENC.encode(s.receipt).decode()
    return (s.state.value, s.next_attempt_at_ms, s.reason, receipt, now, job.seq)


def envelope_values(route: Route[Any, Any], address: Any, checked: tuple[dict[str, Any],
                    dict[str, Any], str], *, producer: str, now: int,
                    tenant: str | None = None) -> tuple[Any, ...]:
    """An envelope's values in the insert's column order after its key: route, kind, producer,
    namespace, object, tenant (the route's, else ``tenant``), identity, digest, address and event
    as JSON, created. ``checked``: the route-checked address and event and their ``digest``."""
    addr, ev, dg = checked
    return (route.name, route.address_kind, producer, route.namespace,
            route.object_name(address), route.tenant_of(address) if route.tenant_of else tenant,
            route.identity_of(address) if route.identity_of else None, dg,
            _ENC.encode(addr).decode(), _ENC.encode(ev).decode(), now)
