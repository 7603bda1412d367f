"""Platform failures typed once (seed section 2): a ``PlatformError`` carries its kind, binding and
a short detail; its error code comes from one table (``PLATFORM_CODES``), and no platform module
decides a platform code itself."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import pytest

import mailbox_actors
from mailbox_actors.platform.control.connection import mapped_error
from mailbox_actors.platform.storage.errors import StorageCorrupt, StorageWriteFailed
from mailbox_actors.wire.errors import (
    PLATFORM_CODES,
    ErrorCode,
    MailboxActorsError,
    PlatformError,
    PlatformErrorKind,
    platform_code,
)

PLATFORM = Path(mailbox_actors.__file__).parent / "platform"
PLATFORM_CODE_NAMES = {"UNAVAILABLE", "TIMEOUT", "UPSTREAM_ERROR", "INTERNAL_ERROR"}


def test_the_table_is_the_seeds() -> None:
    """Seed section 2: Unavailable -> unavailable (503, retryable), Timeout -> timeout (504,
    retryable), Upstream -> upstream_error (502, retryable), NotFound of a named object -> its
    own *_not_found, NotFound of an internal one, Corrupt and Internal -> internal_error (500)."""
    assert {k.value: (c.value, c.http_status, c.retryable) for k, c in PLATFORM_CODES.items()} == {
        "unavailable": ("unavailable", 503, True),
        "timeout": ("timeout", 504, True),
        "upstream": ("upstream_error", 502, True),
        "not_found": ("internal_error", 500, True),
        "corrupt": ("internal_error", 500, True),
        "internal": ("internal_error", 500, True),
    }
    assert platform_code(PlatformErrorKind.NOT_FOUND, ErrorCode.TENANT_NOT_FOUND) \
        is ErrorCode.TENANT_NOT_FOUND
    assert platform_code(PlatformErrorKind.CORRUPT, ErrorCode.TENANT_NOT_FOUND) \
        is ErrorCode.INTERNAL_ERROR
    e = PlatformError(PlatformErrorKind.UPSTREAM, "cloudflare", "http_502", "the API failed")
    assert isinstance(e, MailboxActorsError) and e.code is ErrorCode.UPSTREAM_ERROR
    assert (e.kind, e.binding, e.detail) == (PlatformErrorKind.UPSTREAM, "cloudflare", "http_502")
    assert e.to_body().retryable


def test_platform_failures_are_typed_where_they_happen() -> None:
    """A locked or full control database, a damaged or unwritable actor file each raise a
    PlatformError of the right kind; a constraint is still the caller's conflict."""
    locked = mapped_error(sqlite3.OperationalError("database is locked"))
    assert isinstance(locked, PlatformError)
    assert (locked.kind, locked.binding, locked.detail, locked.code) == (
        PlatformErrorKind.UNAVAILABLE, "control_db", "locked", ErrorCode.UNAVAILABLE)
    full = mapped_error(sqlite3.OperationalError("database or disk is full"))
    assert isinstance(full, PlatformError) and full.detail == "disk_full"
    other = mapped_error(sqlite3.DatabaseError("file is not a database"))
    assert isinstance(other, PlatformError) and other.code is ErrorCode.INTERNAL_ERROR
    assert mapped_error(sqlite3.IntegrityError("UNIQUE")).code is ErrorCode.CONFLICT
    corrupt = StorageCorrupt("not_a_database")
    assert (corrupt.kind, corrupt.code) == (PlatformErrorKind.CORRUPT, ErrorCode.INTERNAL_ERROR)
    assert StorageWriteFailed("disk_full").kind is PlatformErrorKind.UNAVAILABLE


def _decided_here(tree: ast.AST) -> list[int]:
    """Lines that build an error with a platform code themselves: ``MailboxActorsError(ErrorCode
    .UNAVAILABLE, ...)`` or ``super().__init__(ErrorCode.TIMEOUT, ...)``."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name) \
                and first.value.id == "ErrorCode" and first.attr in PLATFORM_CODE_NAMES:
            out.append(node.lineno)
    return out


@pytest.mark.parametrize("path", sorted(PLATFORM.rglob("*.py")), ids=lambda p: p.name)
def test_no_platform_module_decides_a_platform_code(path: Path) -> None:
    """Regression: the platform's failures were MailboxActorsErrors with codes chosen at each call
    site; now each is a PlatformError whose code only PLATFORM_CODES decides."""
    tree = ast.parse(path.read_text(), str(path))
    assert _decided_here(tree) == [], f"{path.relative_to(PLATFORM)}: use PlatformError(kind, ...)"
