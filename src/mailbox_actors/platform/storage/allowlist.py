"""What workerd lets actor SQL name (RT-13, RT-14): its PRAGMA and function allowlists, its reserved
names, and the SQLite limits it sets on every actor database.

Data and pure checks only, transcribed from the behaviour of workerd's ``util/sqlite.c++`` (the
authorizer and ``setupSecurity``) and ``api/sql.c++`` (``isAllowedName``), so that SQL that runs
here runs on Durable Objects and SQL refused there is refused here.
"""

from __future__ import annotations

import enum
import sqlite3

__all__ = ["ALLOWED_FUNCTIONS", "SQLITE_LIMITS", "is_allowed_name", "pragma_denial"]


class _Arg(enum.Enum):
    NONE = "no argument"
    BOOLEAN = "an optional boolean"
    OBJECT = "a table or index name"
    OPTIONAL_OBJECT = "an optional table or index name"
    OPTIONAL_NUMBER = "an optional number"
    OPTIONAL_NUMBER_OR_OBJECT = "an optional number or table name"


# workerd's ALLOWED_PRAGMAS: every other PRAGMA (journal_mode, synchronous, integrity_check,
# user_version, ...) is refused, read or written.
_PRAGMAS: dict[str, _Arg] = {
    "data_version": _Arg.NONE,
    "page_size": _Arg.NONE,  # read only: page_size=N is refused
    "case_sensitive_like": _Arg.BOOLEAN,
    "foreign_keys": _Arg.BOOLEAN,
    "defer_foreign_keys": _Arg.BOOLEAN,
    "ignore_check_constraints": _Arg.BOOLEAN,
    "legacy_alter_table": _Arg.BOOLEAN,
    "recursive_triggers": _Arg.BOOLEAN,
    "reverse_unordered_selects": _Arg.BOOLEAN,
    "foreign_key_check": _Arg.OPTIONAL_OBJECT,
    "foreign_key_list": _Arg.OBJECT,
    "index_info": _Arg.OBJECT,
    "index_list": _Arg.OBJECT,
    "index_xinfo": _Arg.OBJECT,
    "quick_check": _Arg.OPTIONAL_NUMBER_OR_OBJECT,
    "optimize": _Arg.OPTIONAL_NUMBER,
}
_BOOLEANS = ("true", "false", "yes", "no", "on", "off", "1", "0")

# workerd's ALLOWED_SQLITE_FUNCTIONS, less load_extension (workerd's build has no extension
# loading; this one does) and fts3_tokenizer (not in workerd's list either).
ALLOWED_FUNCTIONS = frozenset("""
abs changes char coalesce concat concat_ws format glob hex ifnull iif instr last_insert_rowid length
like likelihood likely lower ltrim max_scalar min_scalar nullif octet_length printf quote random
randomblob replace round rtrim sign soundex substr substring total_changes trim typeof unhex unicode
unlikely upper zeroblob
date time datetime julianday unixepoch strftime timediff current_date current_time current_timestamp
avg count group_concat max min string_agg sum total
row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
acos acosh asin asinh atan atan2 atanh ceil cos cosh degrees exp floor ln log log2 mod pi pow
radians sin sinh sqrt tan tanh trunc
json jsonb json_array jsonb_array json_array_length json_extract jsonb_extract -> ->> json_insert
jsonb_insert json_object jsonb_object json_patch jsonb_patch json_remove jsonb_remove json_replace
jsonb_replace json_set jsonb_set json_type json_valid json_quote json_group_array jsonb_group_array
json_group_object jsonb_group_object json_each json_tree
match highlight bm25 snippet rtreecheck
sqlite_rename_column sqlite_rename_table sqlite_rename_test sqlite_drop_column sqlite_rename_quotefix
""".split())

# setupSecurity's sqlite3_limit calls. SQLITE_LIMIT_LENGTH, SQL_LENGTH, COLUMN and VARIABLE_NUMBER
# come from the RT-7 settings (Limits) instead; these are fixed as workerd fixes them.
SQLITE_LIMITS: tuple[tuple[int, int, str], ...] = (
    (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 100, "max_expression_depth"),
    (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 5, "max_compound_select_terms"),
    (sqlite3.SQLITE_LIMIT_VDBE_OP, 25_000, "max_vdbe_ops"),
    (sqlite3.SQLITE_LIMIT_FUNCTION_ARG, 127, "max_function_args"),
    (sqlite3.SQLITE_LIMIT_ATTACHED, 0, "max_attached"),
    (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 50, "max_like_pattern_bytes"),
    (sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 10, "max_trigger_depth"),
    (sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0, "max_worker_threads"),
)


def is_allowed_name(name: str) -> bool:
    """workerd's rule: ``_cf_`` (any case) is Cloudflare's; this runtime reserves ``_ma_`` too."""
    return name[:4].lower() not in ("_cf_", "_ma_")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]:
        return value[1:-1]
    return value


def _is_int(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


def pragma_denial(name: str, arg: str | None) -> str | None:
    """Why workerd refuses ``PRAGMA name`` / ``PRAGMA name(arg)`` / ``PRAGMA name = arg``."""
    pragma = name.lower()
    if pragma == "table_list":
        return None
    if pragma in ("table_info", "table_xinfo"):
        if arg is None or not is_allowed_name(_unquote(arg)):
            return f"PRAGMA {pragma} needs a table of the actor's own"
        return None
    sig = _PRAGMAS.get(pragma)
    if sig is None:
        return f"PRAGMA {name} is not allowed (workerd's PRAGMA allowlist)"
    ok: bool
    if arg is None:
        ok = sig is not _Arg.OBJECT
    elif sig is _Arg.NONE:
        ok = False
    elif sig is _Arg.BOOLEAN:
        ok = _unquote(arg).lower() in _BOOLEANS
    elif sig is _Arg.OPTIONAL_NUMBER:
        ok = _is_int(arg)
    elif sig is _Arg.OPTIONAL_NUMBER_OR_OBJECT:
        ok = _is_int(arg) or is_allowed_name(_unquote(arg))
    else:
        ok = is_allowed_name(_unquote(arg))
    return None if ok else f"PRAGMA {pragma} takes {sig.value}"
