"""The ``-shm`` emptying helper (``wal_index``): a program of its own, run by path in a bare
interpreter (``python -I -S shm_helper.py KEPT_BYTES DMS_BYTE``), that imports nothing but the
standard library's low-level modules.

It reads NUL-ended file names from standard input and truncates each one's index to
``KEPT_BYTES`` under an open file description write lock on its DMS byte, taken by this process:
granted only while no connection anywhere has the index mapped, and its close drops no lock of
the node's. A file with hard links, or whose index is gone, is left alone. An empty name asks it
to say it has done every name before (one byte back on standard output). It ends when the node's
end of the pipe closes, after the names already sent; SIGINT and SIGTERM, which a terminal or a
supervisor sends the node's whole group, do not cut that short.
"""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import sys

__all__ = ["empty", "main"]


def empty(name: bytes, lock: bytes, kept: int) -> None:
    """Truncate ``name``'s index to ``kept`` bytes, unless someone has it mapped."""
    try:
        if os.stat(name).st_nlink != 1:
            return
        fd = os.open(name + b"-shm", os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, lock)
        os.ftruncate(fd, kept)
    except OSError:
        pass
    finally:
        os.close(fd)  # the lock goes with it


def main(kept: int, dms_byte: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, dms_byte, 1, 0)
    rest = b""
    while True:
        data = os.read(0, 65536)
        if not data:
            return
        *names, rest = (rest + data).split(b"\0")
        for name in names:
            if name:
                empty(name, lock, kept)
            else:
                os.write(1, b".")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
