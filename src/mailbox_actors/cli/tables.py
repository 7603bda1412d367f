"""Printing an answer for people or for programs: aligned columns on a terminal, one JSON document
with ``--json`` (the commands' common ``--json`` flag and their table output)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = ["add_json_argument", "cell", "print_json", "print_table", "when"]

_MAX_CELL = 60


def add_json_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")


def print_json(value: Any) -> None:
    print(json.dumps(msgspec.to_builtins(value), indent=2))


def when(ms: int | None) -> str:
    """A Unix-ms time as ISO 8601 UTC to the second ('-' for none)."""
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cell(value: Any) -> str:
    """One value as a table shows it: redacted values by their size, long text cut."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, msgspec.Struct) and type(value).__name__ == "Redacted":
        return f"<{value.type} {value.bytes} B>"  # type: ignore[attr-defined]
    if isinstance(value, dict) and value.get("kind") == "redacted":
        return f"<{value.get('type')} {value.get('bytes')} B>"
    text = value if isinstance(value, str) else json.dumps(msgspec.to_builtins(value))
    text = text.replace("\n", " ")
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[cell(v) for v in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    out = sys.stdout
    out.write("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
