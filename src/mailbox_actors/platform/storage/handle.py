"""What the standard ``sqlite3`` module cannot set on Python 3.11 (ADR 0012): the page cache's bulk
allocation, and keeping an actor file's write-ahead log when its connection closes.

Both are documented SQLite settings. ``SQLITE_CONFIG_PAGECACHE`` with no buffer and no lines stops
every connection from allocating 20 pages (about 88 KB) at its first read; pages are then allocated
one at a time as they are read, so a small actor costs what it holds. It is process-wide and must be
set before SQLite initialises, that is before ``_sqlite3`` is imported: ``configure_sqlite`` runs
just before that import (the package's ``__init__`` arranges it) and does nothing once
``_sqlite3`` is loaded.

``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` keeps the log on close instead of checkpointing it into the
database (two fsyncs, and a new log with its own fsync at the next write). Nothing committed is
lost: the log holds every committed transaction, synced as ``synchronous`` says, and the next open
reads it. ``sqlite3.Connection.setconfig`` sets it from Python 3.12; on CPython 3.11 the
connection's ``sqlite3*`` (the first field after the object header) is reached through ctypes, and
checked with ``sqlite3_db_filename`` before anything is set on it. A log that has grown past
``WAL_KEEP_BYTES`` is checkpointed at close as before, so files on disk stay bounded.

``shed_caches`` frees what opening an actor left cached and its code may never use again (ADR
0015): the page cache's unpinned pages (``sqlite3_db_release_memory``, which no Python version
exposes) and the statements the runtime prepared to read its meta, alarm and schema version.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mailbox_actors.platform.sqlite_library import (
    configure_sqlite,
    page_cache_configured,
    sqlite_library,
)
from mailbox_actors.platform.storage.wal_index import closed, key

if TYPE_CHECKING:
    import sqlite3

__all__ = ["WAL_KEEP_BYTES", "close_connection", "configure_sqlite", "keep_wal_on_close",
           "page_cache_configured", "shed_caches"]

# Re-exported: the library lookup and the process-wide setting live in platform.sqlite_library.

WAL_KEEP_BYTES = 256 * 1024  # a log past this is checkpointed when the file closes
_DBCONFIG_NO_CKPT_ON_CLOSE = 1006


_layout_checked = False  # a handle read at this offset was once proved to be its file's
_HANDLE_AT = object.__basicsize__  # the ``sqlite3*``'s offset in a connection object (CPython 3.11)
_POSSIBLE = sys.implementation.name == "cpython" and sys.platform == "linux"
_HAS_SETCONFIG = sys.version_info >= (3, 12)  # Connection.setconfig
_KEEP, _NO_KEEP = ctypes.c_int(1), ctypes.c_int(0)
_OP_NO_CKPT = ctypes.c_int(_DBCONFIG_NO_CKPT_ON_CLOSE)
_LRU_CACHE = type(functools.lru_cache(maxsize=1)(int))
_cache_at: int | None = None  # where the statement cache is among a connection's referents
_release: Any = None  # sqlite3_db_release_memory, with its prototype, keeping the GIL
_held: Any = None  # the SQLite library's functions called with the GIL held (``_holding_gil``)


def _holding_gil() -> Any:
    """The SQLite library as ``ctypes.PyDLL`` sees it: its functions keep the GIL while they run.
    For the short calls made here (a setting, the release of an idle connection's pages) that is
    cheaper than ``CDLL``'s release and retaking, each a point where a file thread takes the GIL
    and the event loop waits for it back (ADR 0017)."""
    global _held
    if _held is None:
        lib = sqlite_library()
        _held = ctypes.PyDLL(lib._name, handle=lib._handle)
    return _held


def _handle(conn: sqlite3.Connection, path: str | Path) -> int | None:
    """The connection's ``sqlite3*`` on CPython 3.11, when it provably is the handle of ``path``.
    The proof (``sqlite3_db_filename`` is the file just opened) is made once per process: the
    offset of the handle in a connection object is the same for every one of them."""
    global _layout_checked
    if _layout_checked:  # proved: the handle is at its offset in every connection
        return ctypes.c_void_p.from_address(id(conn) + _HANDLE_AT).value
    if not _POSSIBLE:
        return None
    lib = sqlite_library()
    if lib is None:
        return None
    handle = ctypes.c_void_p.from_address(id(conn) + _HANDLE_AT).value
    if not handle:
        return None
    name = lib.sqlite3_db_filename(handle, b"main")
    if name is None:
        return None
    # realpath (a syscall per path component) only when the plain absolute path differs.
    opened = os.fsdecode(name)
    if opened != os.path.abspath(path) and opened != os.path.realpath(path):
        return None
    _layout_checked = True
    return int(handle)


def keep_wal_on_close(conn: sqlite3.Connection, path: str | Path, keep: bool = True) -> bool:
    """Set whether closing ``conn`` leaves the log for the next open (True: it was set)."""
    if _HAS_SETCONFIG:
        return bool(conn.setconfig(_DBCONFIG_NO_CKPT_ON_CLOSE, keep))  # type: ignore[attr-defined]
    handle = _handle(conn, path)
    if not handle:
        return False
    # No pointer for the setting's new value: SQLITE_OK says the setting is known and made.
    rc = _holding_gil().sqlite3_db_config(ctypes.c_void_p(handle), _OP_NO_CKPT,
                                          _KEEP if keep else _NO_KEEP, None)
    return bool(rc == 0)


def shed_caches(conn: sqlite3.Connection, path: str | Path, cached_statements: int) -> None:
    """Free ``conn``'s unpinned cached pages (read again from the OS's cache when needed) and
    finalize its cached statements (prepared again at their next use).

    The statement cache is CPython's ``functools.lru_cache`` around the connection, which the
    connection reports to the garbage collector; it is cleared only when one referent provably
    is that cache (its ``cache_info`` says the ``maxsize`` the connection was opened with). That
    proof is made once: its place among the referents (the order the connection reports its
    fields in) is the same for every connection, so later ones check only its type there."""
    global _cache_at, _release
    handle = _handle(conn, path)
    if handle is not None:
        release = _release
        if release is None:
            # Made whole with its prototype before it is published: file threads call this too.
            release = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(
                ("sqlite3_db_release_memory", _holding_gil()))
            _release = release
        release(handle)
    refs = gc.get_referents(conn)
    at = _cache_at
    if at is not None and at < len(refs) and type(refs[at]) is _LRU_CACHE:
        refs[at].cache_clear()
        return
    for i, ref in enumerate(refs):
        info = getattr(ref, "cache_info", None)
        if callable(info) and getattr(info(), "maxsize", None) == cached_statements:
            ref.cache_clear()
            _cache_at = i if type(ref) is _LRU_CACHE else None
            break


def close_connection(conn: sqlite3.Connection, path: str | Path, *, keep_wal: bool) -> None:
    """Close ``conn`` (a connection ``opening`` made, counted in ``wal_index``). With ``keep_wal``
    and a log of at most ``WAL_KEEP_BYTES`` the log stays for the next open (set here, at the
    only moment it matters, so opening pays nothing for it); otherwise SQLite's close
    checkpoints it into the database, as by default."""
    if keep_wal:
        try:
            # The log's name as a string: the path's own is kept by pathlib once made (at
            # open), where a new Path for the log cost its parsing and formatting at every close.
            small = os.stat(os.fspath(path) + "-wal").st_size <= WAL_KEEP_BYTES
        except OSError:
            small = True  # no log to checkpoint: nothing is lost by keeping what comes
        if small:
            keep_wal_on_close(conn, path)
    conn.close()
    # The log stays; its index is emptied when this was the file's last connection, so that the
    # next open finds nothing written back to truncate (``wal_index``).
    closed(key(path))
