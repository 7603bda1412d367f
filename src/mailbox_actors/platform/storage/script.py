"""Splitting an ``exec`` script into its statements (RT-13), as workerd's multi-statement exec
does: ``;`` separates statements except inside quotes, comments and a trigger's ``BEGIN ... END``.

Pure text work; SQLite's own ``complete_statement`` decides where a statement really ends, so a
trigger body's inner ``;`` never cuts it. Nothing here runs SQL.
"""

from __future__ import annotations

import sqlite3

__all__ = ["split_statements"]

_QUOTES = {"'": "'", '"': '"', "`": "`", "[": "]"}


def _skip_blank(text: str, i: int) -> int:
    """Index of the first character at or after ``i`` that is neither blank nor comment."""
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            nl = text.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            break
    return i


def split_statements(query: str) -> list[str]:
    """The statements of ``query`` in order, each with its ``;`` (blank tails dropped).

    An unterminated quote or comment leaves the rest as one statement, for SQLite to refuse.
    """
    if ";" not in query:
        return [query]
    out: list[str] = []
    start = _skip_blank(query, 0)
    i, n = start, len(query)
    while i < n:
        ch = query[i]
        if ch in _QUOTES:
            close = query.find(_QUOTES[ch], i + 1)
            # '' inside a string is an escaped quote: find() simply lands on it and goes on.
            i = n if close < 0 else close + 1
        elif query.startswith("--", i):
            nl = query.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif query.startswith("/*", i):
            end = query.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch == ";":
            piece = query[start:i + 1]
            i += 1
            if sqlite3.complete_statement(piece):  # not a ';' inside a trigger body
                if piece.strip() != ";":
                    out.append(piece)
                start = i = _skip_blank(query, i)
        else:
            i += 1
    if start < n:
        out.append(query[start:])
    return out or [query]
