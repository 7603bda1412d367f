"""Whole or damaged (OPS-2): how a SQLite file the node depends on comes into being, and the check
made before one that exists is opened.

SQLite treats a zero-length file, and one cut short inside its first page, as a new empty database,
and would write a fresh schema over it: an object or a tenant list that existed would silently come
back empty. So a file is never created in place: it is built under a temporary name and moved (or
hard-linked, when several processes may race) into place whole, already a valid SQLite file. Then a
file at the final path that is empty, shorter than its header says, or not SQLite at all is damage,
never "new".
"""

from __future__ import annotations

import errno
import os
import sqlite3
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

from mailbox_actors.wire.errors import PlatformError, PlatformErrorKind

__all__ = ["DIR_MODE", "FILE_MODE", "DamagedFile", "check_whole", "create_whole", "damage_of",
           "examine", "is_disk_full", "make_dirs", "private_file"]

DIR_MODE = 0o700  # OPS-5: data directories and every file in them are the node's alone
FILE_MODE = 0o600
_MAGIC = b"SQLite format 3\x00"
# The header's fields ``examine`` reads: magic, page size, change counter, page count, and the
# counter the page count is valid for (offsets 0, 16, 24, 28, 92 of its 100 bytes).
_HEADER = struct.Struct(">16sH6xII60xI4x")


class DamagedFile(PlatformError):
    """A shared file the node needs (the control database, the queue file) is not a whole SQLite
    file. Restarting cannot help: an operator must restore it or move it aside."""

    def __init__(self, path: Path, what: str, damage: str) -> None:
        super().__init__(
            PlatformErrorKind.CORRUPT, what, damage,
            f"the {what} {path} is damaged ({damage}): restore it from a backup, or move it aside "
            "(for example to " + path.name + ".damaged) to start with an empty one",
            details={"path": str(path), "damage": damage})
        self.path = path
        self.damage = damage


def make_dirs(path: Path) -> None:
    """``mkdir -p`` where every directory it makes is 0700 (OPS-5; ``Path.mkdir(parents=True)``
    gives the parents the default mode)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (SQLite then keeps the mode, and
    gives its -wal and -shm files the same)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        pass


def is_disk_full(e: BaseException) -> bool:
    """Whether SQLite failed a write for want of space or a failing write (SQLITE_FULL, and the
    I/O error a file-size limit or a bad disk gives): a condition of the machine, retryable."""
    if not isinstance(e, sqlite3.OperationalError):
        return False
    text = str(e).lower()
    return "disk is full" in text or "disk i/o error" in text


def damage_of(path: Path) -> str | None:
    """What is wrong with the SQLite file at ``path`` (which exists), or None if it looks whole.

    Reads the 100-byte header only. The page count in the header is compared with the file's size
    only while no write-ahead log holds pages (a crash in the middle of a checkpoint leaves the main
    file short until SQLite replays the log, which is not damage)."""
    try:
        return examine(os.fspath(path))
    except OSError as e:  # FileNotFoundError included: a file that should be there
        return f"unreadable: {e.strerror}"


def examine(path: str) -> str | None:
    """``damage_of`` for a file that may be missing (then FileNotFoundError): one descriptor
    (open, fstat, pread) and one stat of the log, on the path as a string, since every actor
    file's activation passes here."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        # Out of descriptors or permissions: a condition of the moment, not of the file.
        return None if e.errno in (errno.EACCES, errno.EMFILE, errno.ENFILE) else \
            f"unreadable: {e.strerror}"
    try:
        size = os.fstat(fd).st_size
        header = os.pread(fd, 100, 0)
    except OSError as e:
        return f"unreadable: {e.strerror}"
    finally:
        os.close(fd)
    if len(header) == 100:  # the common case, a whole file, in one unpack
        magic, page_size, change_counter, pages, valid_for = _HEADER.unpack(header)
        if page_size == 1:
            page_size = 65536
        if magic == _MAGIC and page_size >= 512 and not page_size & (page_size - 1) and \
                size >= page_size and (change_counter != valid_for or size >= pages * page_size):
            return None
    if size == 0:
        return "it is empty (zero bytes)"
    if len(header) < 100 or not header.startswith(_MAGIC):
        return "its header is not a SQLite header" if len(header) >= 16 else "it is truncated"
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return "its header is not a SQLite header"
    if size < page_size:
        return f"it is truncated ({size} bytes, less than one {page_size}-byte page)"
    change_counter, pages, valid_for = header[24:28], header[28:32], header[92:96]
    expected = struct.unpack(">I", pages)[0] * page_size
    if change_counter != valid_for or size >= expected:
        return None
    try:
        wal_holds_pages = os.stat(path + "-wal").st_size > 0
    except FileNotFoundError:
        wal_holds_pages = False
    return None if wal_holds_pages else f"it is truncated ({size} bytes; its header says {expected})"


def check_whole(path: Path, what: str) -> None:
    """Raise ``DamagedFile`` if the file at ``path`` exists and is not a whole SQLite file."""
    if path.is_file():  # not a file at all (a directory): opening it fails and says so
        damage = damage_of(path)
        if damage is not None:
            raise DamagedFile(path, what, damage)


def create_whole(path: Path, statements: Iterable[str] = (), *, fsync: bool = False,
                 prepare: Callable[[sqlite3.Connection], None] | None = None) -> bool:
    """Put a new SQLite file (WAL mode, ``statements`` run in one transaction) at ``path`` in one
    step, mode 0600. Returns False, changing nothing, when a file is already there (another
    process may have won the race: it is hard-linked into place, never renamed over one)."""
    if path.exists():
        return False
    make_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
        leftover.unlink(missing_ok=True)  # a build a crash interrupted
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            if prepare is not None:
                prepare(conn)
            conn.execute("BEGIN")
            for stmt in statements:
                conn.execute(stmt)
            conn.execute("COMMIT")
        finally:
            conn.close()  # the last connection checkpoints and removes the log: one whole file
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: a rename, after the check above
            if path.exists():
                return False
            os.rename(tmp, path)
        if fsync:
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return True
    finally:
        tmp.unlink(missing_ok=True)
