"""The SQLite library that ``_sqlite3`` uses, reached through ctypes, and the one process-wide
setting made before SQLite initialises (ADR 0012): the page cache's initial bulk allocation off.

Kept out of ``platform.storage`` so that the package's ``__init__`` can arrange ``configure_sqlite``
without loading actor storage (a host service importing only the client stays light).
``configure_sqlite_before_import`` is what it calls: the setting is made just before ``_sqlite3``
loads (whoever imports it: ``sqlite3``, aiosqlite, a user's program after ``mailbox_actors``), so a
process that never opens SQLite (``status``, ``id``, ``call``, a client) imports neither ctypes
nor the SQLite library for it.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself is not imported: the package's __init__ imports this module
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

__all__ = ["configure_sqlite", "configure_sqlite_before_import", "page_cache_configured",
           "sqlite_library"]

_CONFIG_PAGECACHE = 7
_lib: Any = None
_lib_tried = False
_page_cache_configured = False


def sqlite_library() -> Any:
    """The SQLite the ``_sqlite3`` extension uses: symbols looked up through the extension itself
    (its own copy if linked statically, else the shared library it loaded), or None."""
    global _lib, _lib_tried
    if not _lib_tried:
        _lib_tried = True
        import ctypes
        import os
        from importlib.machinery import PathFinder  # loaded at start; importlib.util is not

        try:
            spec = PathFinder.find_spec("_sqlite3")
            origin = spec.origin if spec is not None else None
            if origin and os.path.exists(origin):
                lib = ctypes.CDLL(origin)
                lib.sqlite3_config  # noqa: B018 - raises AttributeError when not exported
                lib.sqlite3_db_filename.restype = ctypes.c_char_p
                lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
                _lib = lib
        except (OSError, AttributeError, ImportError, ValueError):
            _lib = None
    return _lib


def configure_sqlite() -> bool:
    """Turn off the page cache's initial bulk allocation, if SQLite is not initialised yet."""
    global _page_cache_configured
    if _page_cache_configured or "_sqlite3" in sys.modules:
        return _page_cache_configured
    lib = sqlite_library()
    if lib is None or sys.platform != "linux":  # variadic calls through ctypes: x86-64/arm64 Linux
        return False
    import ctypes

    rc = lib.sqlite3_config(ctypes.c_int(_CONFIG_PAGECACHE), ctypes.c_void_p(None),
                            ctypes.c_int(0), ctypes.c_int(0))
    _page_cache_configured = bool(rc == 0)
    return _page_cache_configured


class _BeforeSqlite:
    """A finder on ``sys.meta_path`` that finds nothing: asked for ``_sqlite3`` (the import that
    initialises SQLite), it removes itself and calls ``configure_sqlite`` first; the import then
    goes on through the other finders, as without it."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name == "_sqlite3":
            try:
                sys.meta_path.remove(_BeforeSqlite)
            except ValueError:  # removed meanwhile (another thread's import)
                return None
            configure_sqlite()
        return None


def configure_sqlite_before_import() -> None:
    """``configure_sqlite`` just before ``_sqlite3`` is first imported (now, if it already was:
    it then does nothing, as SQLite may be initialised)."""
    if "_sqlite3" in sys.modules:
        configure_sqlite()
    elif _BeforeSqlite not in sys.meta_path:
        sys.meta_path.insert(0, _BeforeSqlite)


def page_cache_configured() -> bool:
    return _page_cache_configured
