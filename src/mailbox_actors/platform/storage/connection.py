"""The screened connection under an actor's storage (RT-5, RT-6, RT-7, RT-13, OPS-3): SQLite's
authorizer applied to user statements, each query split and screened once, the runtime's own
statements exempt from screening, and errors mapped to the codes of SPEC section 5.

The runtime's statement texts carry a token that user SQL may not contain, so user SQL can never
reuse their cached, pre-authorised statements. What a statement may do is ``screen``'s and
``allowlist``'s rule; rows read and written are ``counting``'s; transactions are
``transactions``'; the API actor code calls is ``sql``'s.
"""

from __future__ import annotations

import os
import sqlite3
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mailbox_actors.platform.storage.counting import RowCounter
from mailbox_actors.platform.storage.errors import StatementRefused
from mailbox_actors.platform.storage.known import MAX_TEXT_LEN, MAX_TEXTS, SchemaFacts
from mailbox_actors.platform.storage.limits import Limits
from mailbox_actors.platform.storage.screen import changes_schema, classify, denial, map_error
from mailbox_actors.platform.storage.script import split_statements
from mailbox_actors.wire.errors import LimitExceeded

__all__ = ["RUNTIME_TOKEN", "ScreenedConnection"]

# Carried by the text of every runtime statement; a user query containing it is refused (``_plan``),
# so user SQL never reaches a runtime statement's cached, pre-authorised copy, in any connection.
# That refusal is the guarantee, so one token serves the process: random only so that no honest
# text contains it by chance, and made once rather than at every activation. os.urandom is what
# secrets.token_hex reads; the secrets module would import hmac, hashlib (OpenSSL's start) and
# random into every node's start for it.
RUNTIME_TOKEN = os.urandom(8).hex()
_BEGIN = f"BEGIN /*{RUNTIME_TOKEN}*/"
_COMMIT = f"COMMIT /*{RUNTIME_TOKEN}*/"
_ROLLBACK = f"ROLLBACK /*{RUNTIME_TOKEN}*/"

T = TypeVar("T")
Plan = tuple[tuple[str, ...], bool, bool]  # its statements, may write?, changes the schema?
_MAX_SHARED = 4096
_MAX_SHARED_TEXT = 2048  # longer texts (and names) are screened again: the caches stay small
# What ``denial`` answers depends on the action and its two names alone, so the process keeps each
# answer: SQLite asks the authorizer again for every statement an activation prepares, and a
# reopened actor prepares all of its statements again.
_VERDICTS: dict[tuple[int, str | None, str | None], str | None] = {}
# A query's plan depends on its text and the statement limit alone (``_plan``): screened once per
# process, not once per activation. The token check stays per connection, before this is read.
_PLANS: dict[tuple[str, int], Plan] = {}
# New texts one connection of a known schema may screen before it screens every text again.
_SCREENINGS = 32
_OK = sqlite3.SQLITE_OK
_DENY = sqlite3.SQLITE_DENY
_RECORDED = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE)  # what the row counter notes


class ScreenedConnection:
    """One actor file's connection, its authorizer and its runtime-only statements."""

    # An open actor holds one storage: its fields here and in ``SqlStorage`` are slots, so the
    # instance dict keeps only the transaction state's (``Transactions``), below the 30 keys past
    # which CPython stops sharing instance dicts' keys (each instance would build a 1.5 KB dict).
    # Class attributes, not per instance:
    __slots__ = ("_conn", "_counter", "_deny_reason", "_facts", "_plans", "_screenings",
                 "_sys_mode", "limits", "path")
    _token = RUNTIME_TOKEN  # marks runtime statement texts (_sys)
    _begin = _BEGIN
    _commit = _COMMIT
    _rollback = _ROLLBACK

    _conn: sqlite3.Connection
    path: str | Path  # the file (an absolute path text when the host opened it)
    limits: Limits
    _sys_mode: bool
    _deny_reason: str | None
    # query text -> (its statements, may write?, changes the schema?), after screening
    _plans: dict[str, Plan]
    _counter: RowCounter
    # What the file's schema decides, while it is its class's migrations' alone (``known``):
    # then a text known to prepare without a denial is prepared with the authorizer off.
    _facts: SchemaFacts | None
    _screenings: int  # texts prepared with the authorizer since _know

    def __init__(self, conn: sqlite3.Connection, path: str | Path, limits: Limits,
                 facts: SchemaFacts | None) -> None:
        self._conn = conn
        self.path = path
        self.limits = limits
        self._sys_mode = False
        self._deny_reason = None
        self._plans = {}
        # A weak reference: a bound method (or a closure over self) would make conn -> counter
        # -> conn a cycle, and every evicted actor's storage would wait for the cyclic collector
        # (a full pass over thousands of them holds the event loop) instead of going when its
        # last reference does.
        self._counter = RowCounter(weakref.ref(self), self._token)
        self._facts = facts
        self._screenings = 0
        if facts is None:
            conn.set_authorizer(self._authorize)
        else:
            self._counter.share_indexes(facts.indexes)

    # ---- screening -------------------------------------------------------------------------

    def _authorize(self, action: int, a1: str | None, a2: str | None, db: str | None,
                   trigger: str | None) -> int:
        if trigger is None:
            if self._sys_mode:
                # A trigger is always user code, even when a runtime statement fires it.
                return _OK
            if action in _RECORDED:
                self._counter.note(action, a1, a2)
        key = (action, a1, a2)
        try:
            reason = _VERDICTS[key]
        except KeyError:
            reason = denial(action, a1, a2)
            if len(_VERDICTS) < _MAX_SHARED and len(a1 or "") + len(a2 or "") < _MAX_SHARED_TEXT:
                _VERDICTS[key] = reason
        if reason is None:
            return _OK
        self._deny_reason = reason
        return _DENY

    def _plan(self, query: str) -> Plan:
        """Split and screen a query once (``script``, ``screen``): its statements, whether any
        may write, whether any changes the schema. Raises for a refused statement anywhere."""
        if self._token in query:
            # The text of a runtime statement: its cached, pre-authorised copy must stay the
            # runtime's alone.
            raise StatementRefused("this statement belongs to the runtime")
        shared_key = (query, self.limits.max_statement_bytes)
        plan = _PLANS.get(shared_key)
        if plan is None:
            plan = self._screen(query)
            if len(_PLANS) < _MAX_SHARED and len(query) < _MAX_SHARED_TEXT:
                _PLANS[shared_key] = plan
        if len(self._plans) < 4096:
            self._plans[query] = plan
        return plan

    def _screen(self, query: str) -> Plan:
        """``_plan``'s work: it reads the text and the statement limit, nothing else."""
        statements = split_statements(query)
        if len(statements) > 1 and len(query.encode()) > self.limits.max_statement_bytes:
            raise LimitExceeded("max_statement_bytes", self.limits.max_statement_bytes,
                                "SQL script longer than the statement limit")
        writes = ddl = False
        for stmt in statements:
            writes = classify(stmt, self.limits) or writes
            ddl = ddl or changes_schema(stmt)
        return tuple(statements), writes, ddl

    def _map_error(self, e: sqlite3.Error) -> Exception:
        denied, self._deny_reason = self._deny_reason, None
        return map_error(e, self.limits, denied, self._near_size_limit)

    def _near_size_limit(self) -> bool:
        """Whether the file is within reach of max_database_bytes (the last sixteenth, or the
        last 64 MiB): then "full" is the actor's own limit, otherwise the disk's (OPS-3)."""
        try:
            used = self.database_size
        except sqlite3.Error:
            return False
        limit = self.limits.max_database_bytes
        return used >= limit - max(64 << 20, limit // 16)

    # ---- what the schema decides (``known``) -----------------------------------------------

    def _know(self, facts: SchemaFacts | None) -> None:
        """The file's schema is the one ``facts`` describe (its migrations' alone): the
        authorizer comes off, and only a text this process has not yet seen prepare without a
        denial on that schema is prepared with it (``_screened``). Setting an authorizer makes
        SQLite expire every prepared statement, so it stays off rather than on around each
        known text. What this connection cached of the schema is worked out again through the
        checks (nothing prepared before, during the migrations, skips them)."""
        if facts is None or self._facts is not None:
            return
        self._facts = facts
        self._screenings = 0
        self._counter.share_indexes(facts.indexes)
        self._conn.set_authorizer(None)

    def _forget_schema(self) -> None:
        """The schema is about to change, or this connection prepares too many texts of its own:
        every statement is screened again, as on any file."""
        if self._facts is not None:
            self._facts = None
            self._counter.share_indexes(None)
            self._conn.set_authorizer(self._authorize)

    def _screened(self, run: Callable[[], T]) -> T:
        """``run`` prepares a text not known to pass the authorizer on this schema: with it.
        A connection that keeps preparing new texts (dynamic SQL) goes back to screening all:
        each authorizer set expires its prepared statements."""
        self._screenings += 1
        if self._screenings > _SCREENINGS:
            self._forget_schema()
            return run()
        conn = self._conn
        conn.set_authorizer(self._authorize)
        try:
            return run()
        finally:
            if self._facts is not None:
                conn.set_authorizer(None)

    # ---- the runtime's own statements ------------------------------------------------------

    @property
    def database_size(self) -> int:
        """Bytes the database uses: (page_count - freelist_count) * page_size, as workerd counts."""
        pages = self._sys("PRAGMA page_count").fetchone()[0] - \
            self._sys("PRAGMA freelist_count").fetchone()[0]
        size = self._sys("PRAGMA page_size").fetchone()[0]
        return int(pages * size)

    def file_setting(self, pragma: str) -> Any:
        """The file's journal_mode or synchronous, which actor SQL may not read (RT-13): for the
        runtime, operators and tests."""
        if pragma not in ("journal_mode", "synchronous"):
            raise ValueError(f"file_setting reads journal_mode or synchronous, not {pragma!r}")
        return self._sys(f"PRAGMA {pragma}").fetchone()[0]

    def _sys(self, query: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Runtime-owned SQL, exempt from screening. Texts carry the connection's token so user
        SQL can never hit their cached, pre-authorised statements."""
        facts = self._facts
        if facts is not None:
            if query in facts.runtime_texts:
                return self._conn.execute(query, params)  # the authorizer is off (``_know``)
            cur = self._screened(lambda: self._sys_screened(query, params))
            if facts is self._facts and len(query) < MAX_TEXT_LEN \
                    and len(facts.runtime_texts) < MAX_TEXTS:
                facts.runtime_texts.add(query)  # no denial here: none on every such file
            return cur
        return self._sys_screened(query, params)

    def _sys_screened(self, query: str, params: Sequence[Any]) -> sqlite3.Cursor:
        self._sys_mode = True
        try:
            return self._conn.execute(query, params)
        finally:
            self._sys_mode = False

