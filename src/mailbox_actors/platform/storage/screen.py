"""What actor SQL may do (RT-6, RT-7): the rules the storage screens user statements with.

Transaction control, ATTACH/DETACH, VACUUM, PRAGMA writes and the reserved ``_ma_``/``_cf_`` names
are refused (workerd screens the same way); a statement is classified once as a read or a write;
SQLite's limit errors become ``limit_exceeded`` naming the limit.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable

from mailbox_actors.platform.storage.allowlist import (
    ALLOWED_FUNCTIONS,
    SQLITE_LIMITS,
    is_allowed_name,
    pragma_denial,
)
from mailbox_actors.platform.storage.errors import StatementRefused, StorageWriteFailed
from mailbox_actors.platform.storage.limits import Limits
from mailbox_actors.wire.errors import LimitExceeded

__all__ = ["changes_schema", "classify", "denial", "map_error"]

_LEADING = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*([A-Za-z]+)", re.S)
_REFUSED_FIRST_WORDS = {
    "BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE", "ATTACH", "DETACH", "VACUUM",
}
_READ_FIRST_WORDS = {"SELECT", "VALUES", "EXPLAIN", "PRAGMA"}
_WRITE_WORD = re.compile(r"\b(INSERT|UPDATE|DELETE|REPLACE)\b", re.I)
# The authorizer is never told the new name of ALTER TABLE ... RENAME TO, so screen the text.
_RENAME_RESERVED = re.compile(r"\bRENAME\s+(?:COLUMN\s+)?\S*\s*(?:TO\s+)?[\"'`\[]?_(?:ma|cf)_",
                              re.I)

_MAPPED_LIMITS: tuple[tuple[str, str], ...] = (
    ("too many sql variables", "max_bound_parameters"),
    ("string or blob too big", "max_value_bytes"),
    ("too big", "max_value_bytes"),
    ("query string is too large", "max_statement_bytes"),
    ("statement too long", "max_statement_bytes"),
    ("too many columns", "max_columns"),
    ("database or disk is full", "max_database_bytes"),
    # workerd's fixed limits (allowlist.SQLITE_LIMITS)
    ("like or glob pattern too complex", "max_like_pattern_bytes"),
    ("too many terms in compound select", "max_compound_select_terms"),
    ("expression tree is too large", "max_expression_depth"),
    ("parser stack overflow", "max_expression_depth"),
    ("too many levels of trigger recursion", "max_trigger_depth"),
    ("too many arguments on function", "max_function_args"),
)
_FIXED_LIMITS = {name: value for _, value, name in SQLITE_LIMITS}


# Tables a build may offer that see past the authorizer: the prepared statements of the connection
# (the runtime's, with their token) and the raw pages of the file.
_REFUSED_TABLES = {"sqlite_stmt", "sqlite_dbpage", "dbstat"}
_TEMP_ACTIONS = {sqlite3.SQLITE_CREATE_TEMP_INDEX, sqlite3.SQLITE_CREATE_TEMP_TABLE,
                 sqlite3.SQLITE_CREATE_TEMP_TRIGGER, sqlite3.SQLITE_CREATE_TEMP_VIEW}
_RESERVED_MESSAGE = "names beginning '_ma_' or '_cf_' are reserved for the runtime"


def denial(action: int, a1: str | None, a2: str | None) -> str | None:
    """Why SQLite's authorizer must refuse this action of user SQL, or None to allow it."""
    if action == sqlite3.SQLITE_FUNCTION:
        # workerd's allowlist: fts3_tokenizer (a raw pointer) and load_extension are not in it.
        return None if (a2 or "").lower() in ALLOWED_FUNCTIONS else f"function {a2} is not allowed"
    if action in _TEMP_ACTIONS:
        # Temporary objects live outside the file and its size limit.
        return "temporary tables, views, indexes and triggers are not allowed"
    if action in (sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT) and \
            (a1 or "").lower() in _REFUSED_TABLES:
        return f"{a1} is not available to actor SQL"
    if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
        return "transaction control belongs to the runtime; use transaction_sync"
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return "ATTACH and DETACH are not allowed"
    if action == sqlite3.SQLITE_PRAGMA:
        return pragma_denial(a1 or "", a2)
    if action == sqlite3.SQLITE_ANALYZE:
        return None  # PRAGMA optimize analyzes every table, reserved ones too (as in workerd)
    for name in (a1, a2):
        if name and not is_allowed_name(name):
            return _RESERVED_MESSAGE
    return None


def changes_schema(query: str) -> bool:
    """Whether a (screened) statement creates, drops or alters a table, index, view or trigger."""
    m = _LEADING.match(query)
    return m is not None and m.group(1).upper() in ("CREATE", "DROP", "ALTER")


def classify(query: str, limits: Limits) -> bool:
    """Screen a query; return whether it may write. Raises for refused statements."""
    m = _LEADING.match(query)
    word = m.group(1).upper() if m else ""
    if word in _REFUSED_FIRST_WORDS:
        hint = "" if word in ("ATTACH", "DETACH", "VACUUM") else "; use transaction_sync"
        raise StatementRefused(f"{word} is not allowed in actor SQL{hint}")
    if word == "ALTER" and _RENAME_RESERVED.search(query):
        raise StatementRefused(_RESERVED_MESSAGE)
    if len(query.encode()) > limits.max_statement_bytes:
        raise LimitExceeded("max_statement_bytes", limits.max_statement_bytes,
                            "SQL statement longer than the statement limit")
    if word == "WITH":
        return bool(_WRITE_WORD.search(query))
    return word not in _READ_FIRST_WORDS


def map_error(e: sqlite3.Error, limits: Limits, denied: str | None,
              near_size_limit: Callable[[], bool] | None = None) -> Exception:
    """The error a user statement's failure is reported as (``denied``: what the authorizer
    refused, if it did; ``near_size_limit``: whether the file is close to max_database_bytes, which
    tells the actor's own size limit from a full disk, as SQLite says the same for both)."""
    text = str(e).lower()
    if "disk i/o error" in text or ("database or disk is full" in text and
                                     near_size_limit is not None and not near_size_limit()):
        return StorageWriteFailed("disk_full" if "full" in text else "io_error")
    if isinstance(e, sqlite3.ProgrammingError) and "bindings" in text:
        return StatementRefused("the number of parameters does not match the statement's")
    if "incomplete input" in text or "syntax error" in text:
        # Malformed SQL fails the same way every time: not worth a retry.
        return StatementRefused(f"malformed SQL ({text[:80]})")
    if "not authorized" in text or "prohibited" in text:
        return StatementRefused(denied or "not authorized")
    for needle, limit in _MAPPED_LIMITS:
        if needle in text:
            maximum = _FIXED_LIMITS[limit] if limit in _FIXED_LIMITS else getattr(limits, limit)
            return LimitExceeded(limit, maximum, f"SQLite limit {limit}={maximum} exceeded")
    return e
