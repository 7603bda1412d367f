"""The write-ahead log's index (the ``-shm`` file) of a sleeping actor's file: emptied when the
file's last connection closes, in a process that switched it on (``serve``, ``machine``: below),
so that the next open does not pay to empty it (ADR 0012).

A file closes keeping its log (``handle.close_connection``), and SQLite's close then leaves the
32 KB index beside it too. The kernel writes that back within 30 s, allocating its blocks. The
next connection to map the index finds no other holder of its DMS byte, so it truncates the
index to 3 bytes and rebuilds it from the log. On a written-back index that truncate frees its
blocks: on a file system mounted with ``discard`` it waits for the discard, 0.15-0.4 ms and up to
a few ms on a busy disk. The raw open, write and close cycle on such files ran 1.9-4x slower
than on files whose index was not yet written back (session 18's probe and review s17 O10).

So when the last connection of this process to a file closes, ``closed`` truncates the index to
3 bytes itself, as SQLite's next first opener would, while its pages are still unallocated (a
connection lives a few milliseconds in an alarm's cycle; one that lived past ``FRESH_S`` leaves
its index as SQLite does, for the next open to truncate). Nothing is ever written back or
discarded, and the next open's own truncate finds 3 bytes. The database and its log are never
touched, so no committed write can be lost here, whenever the process dies: an index of 32 KB
or of 3 bytes is opened by the same rule.

The truncate must never happen under a connection that has the index mapped:

- **Other processes** (an operator's inspector, the ``sqlite3`` shell): every connection that
  has the index mapped holds a shared lock on its DMS byte (SQLite's unix VFS). ``closed`` takes
  a write lock on that byte as an open file description lock (``F_OFD_SETLK``), which conflicts
  with every POSIX lock, this process's too. It is granted only when no connection anywhere has
  the index mapped; an opener that comes meanwhile finds it held, gets ``SQLITE_BUSY`` and
  retries. Not granted: the index is left as it is.
- **This process**: closing any descriptor of a file drops every POSIX lock the process holds on
  it (SQLite's documented way to corrupt a database), so ``closed`` opens the index only when no
  other connection of this process has the file open. Every connection this process makes to an
  actor file is counted here (``opening`` registers it before ``sqlite3.connect``;
  ``handle.close_connection``, ``OpenedAhead.close`` and ``readonly.read_only`` call ``closed``):
  **a connection to an actor file made elsewhere in the process is outside this contract** and
  must not be. The count's check and the truncate are one step for that file: a connection to
  it waits in ``opening`` meanwhile. (The database itself is never opened outside SQLite: an
  open looks at it with ``stat`` alone, ``opening._connect``.) A count that is never
  given back (a connection closed another way) only keeps that file's index as SQLite leaves
  it. A file with hard links is left alone: SQLite keeps one index per inode, named after the
  first path it was opened by, so another name's connection may have this one.
- **A connection of this process that is not counted** (a test's or an embedding program's own
  ``sqlite3.connect`` to an actor file) holds the same shared lock, so the first close after it
  mapped the index is refused too; but that attempt's ``os.close`` of its descriptor drops the
  process's POSIX locks on the index, the uncounted connection's with them, so a later attempt
  would be granted and truncate the index under its mapping (SIGBUS at its next access: a test
  run crashed so in session 18). So when a refusal finds a lock of this process on the DMS
  byte (``/proc/locks``, read only then: a refusal is rare), the file is never emptied again by
  this process (``_kept``): the first refusal is always the one that drops the lock. A refusal
  by other processes' locks alone drops nothing of ours and keeps nothing.

So the emptying is **off unless the process switches it on** (``empty_indexes_at_close``), and
only a process whose every connection to actor files goes through ``platform/storage`` may:
``mailbox-actors serve`` and ``machine`` do at their start, and the benchmark's group processes
(their nodes measure what ``serve`` does). A program that embeds a node (``Node``, ``TestRuntime``,
a test calling ``serve()`` in its own process) keeps SQLite's own behaviour, where the guard above
is not enough: after the first refusal its uncounted connection holds no lock on the DMS byte, so
another process's first open of that file would rebuild the index under its mapping. Off, a close
never opens the index at all; the counting goes on (the opens use it: ``opening``).

**Where the truncate runs** (session 21). Switched on with ``empty_indexes_at_close()`` (as
``serve`` does), the truncate runs in a helper process, not in the closing thread: freeing the
index's dirty pages, with the open, the lock and the close around it, was 50-90 us of the event
loop's CPU an evicted alarm (a sixth of it), most of it in the kernel. ``closed`` adds the file's
name to a batch; the batch goes down a pipe when it holds ``_BATCH`` names, or ``_SEND_AFTER_S``
after its first (a sender thread, asleep while nothing waits). The helper, a bare interpreter,
does to each name what ``_empty`` does, under an OFD lock of its own process: it is granted only
while no connection anywhere has the index mapped, a connection of this process included, and
its close drops no lock of this process (so the helper needs neither the count's check nor
``_kept``: a connection of this process that opens the file again meanwhile, counted or not,
holds the DMS byte and the helper leaves that index whole; one that opens it while the helper
holds the lock gets SQLITE_BUSY and retries, as above). The helper ends after the names sent when
this process's end of the pipe closes, at its exit or its SIGKILL. Whatever the helper cannot
take now is emptied here as before (``_empty_here``: the count checked again): no helper (not
started, or within ``_RESTART_AFTER_S`` of one that died: a SIGKILLed helper is found by the
broken pipe), or its pipe full (a helper that does not read never makes a close wait). Names in
the pipe when the helper is killed, or in a batch when this process is, are left as SQLite
leaves them, as a crash between a close and its emptying always did. A node's stop waits until
the helper has done every name it was sent (``settle``). ``elsewhere=False`` keeps the truncate
in the closing thread (tests of those guards).

Linux only (open file description locks, Linux 3.15); elsewhere the index stays as SQLite
leaves it.
"""

from __future__ import annotations

import atexit
import os
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from mailbox_actors.platform.logging import get_logger

__all__ = ["FRESH_S", "INDEX_KEPT_BYTES", "closed", "empty_indexes_at_close", "emptying_on",
           "helper_pid", "key", "opening", "send", "settle", "unsettled"]

INDEX_KEPT_BYTES = 3  # what SQLite's first opener truncates the index to (never 0: ext4's
# auto_da_alloc writes a file truncated to 0 back at its next close, which costs more than this)
_DMS_BYTE = 128  # UNIX_SHM_DMS: UNIX_SHM_BASE (120) + SQLITE_SHM_NLOCK (8), os_unix.c

if sys.platform == "linux":
    import fcntl

    _OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
    # struct flock (l_type, l_whence, l_start, l_len, l_pid and its padding); l_pid must be 0.
    _WRITE_DMS = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, _DMS_BYTE, 1, 0)
else:  # pragma: no cover - the project runs on Linux
    _OFD_SETLK = None

# An index mapped longer than this has likely been written back (the kernel writes dirty pages
# back after 30 s, dirty_expire_centisecs): truncating it frees blocks and waits for their
# discard, which its next open would pay instead; that open may never come, or come in a worker
# thread, where the close may be on the event loop. Such an index is left as SQLite leaves it.
FRESH_S = 20.0
_EMPTYING_POLL_S = 0.0002  # how often a connection to a file whose index is emptied looks again

_on = False  # ``empty_indexes_at_close``: off in a process that did not switch it on
_open_here: dict[str, int] = {}  # connections of this process open on each file, by ``key``
_since: dict[str, float] = {}  # when this process's first connection still open to it opened
# Files whose index this process is emptying now (``closed``): a descriptor of it open outside
# SQLite.
_busy: set[str] = set()
_kept: set[str] = set()  # files whose index someone else had mapped once: never emptied here
_guard = threading.Lock()  # the four above, and the helper's queue (below)

# The emptying process (``elsewhere``): the names of files whose last connection closed, sent
# to it in batches; ``_pending`` waits for the next batch (the sender's thread, ``_sender``,
# sends it ``_SEND_AFTER_S`` after its first name; a close that fills ``_BATCH`` sends at once).
_elsewhere = False
_pending: list[str] = []
_wake = threading.Event()  # set while ``_pending`` waits for the sender's thread
_BATCH = 64
_SEND_AFTER_S = 0.02
_FS_ENCODING = sys.getfilesystemencoding()
_PIPE_BUF = 4096  # a write of at most this much to a pipe is whole or refused, never cut
_RESTART_AFTER_S = 5.0  # after the helper died or could not start: emptied here meanwhile
_send_lock = threading.Lock()  # the helper and its pipe: one sender at a time
_helper: subprocess.Popen[bytes] | None = None
_log = get_logger("mailbox_actors.storage")
_down_until = 0.0
_unsettled = False  # names were sent since the helper last said it had emptied all before
_sender: threading.Thread | None = None

# The helper: ``shm_helper.py``, a program of its own run by path in a bare interpreter (no
# site, no environment: it imports nothing of this package).
_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shm_helper.py")


def empty_indexes_at_close(on: bool = True, elsewhere: bool = True) -> None:
    """Switch the emptying on (or off again) for this process. Only a process that makes every
    connection to actor files through ``platform/storage`` switches it on: ``serve`` and
    ``machine`` do, at their start. Off (the default) the indexes stay as SQLite leaves them, and
    a connection this module does not count is never put at risk (the module's docstring).
    ``elsewhere``: in a helper process (the default: the truncate's kernel work, most of the
    emptying, is off this process's threads); False, in the closing thread."""
    global _on, _elsewhere, _down_until
    # Switched first: a close from here on never hands a name to a helper being stopped.
    _elsewhere = on and elsewhere and _OFD_SETLK is not None
    _on = on
    if not _elsewhere:
        _stop_helper()  # what it was handed is done first
    _down_until = 0.0


def emptying_on() -> bool:
    """Whether this process empties its files' indexes at their last close."""
    return _on


def key(path: str | Path) -> str:
    """The name a file's connections are counted under: its absolute, normalized path text
    (every path of an actor file in the node derives from one data directory)."""
    if type(path) is str and path[:1] == "/" and path[-1:] != "/" and "/." not in path \
            and "//" not in path:
        return path  # already so (the host's ``file_for``): abspath costs 6 K instructions
    return os.path.abspath(path)


def opening(name: str) -> bool:
    """A connection to the file ``name`` (``key``) is about to be made: call before
    ``sqlite3.connect``, and ``closed`` once it is closed (or was never made). True when no
    other connection of this process has the file open. Waits while the file's index is being
    emptied (a few system calls); other files' connections never wait."""
    while True:
        with _guard:
            if name not in _busy:
                held = _open_here.get(name, 0)
                _open_here[name] = held + 1
                if not held:
                    _since[name] = time.monotonic()
                return not held
        time.sleep(_EMPTYING_POLL_S)  # rare: two connections to one file made at once


def closed(name: str) -> bool:
    """A connection ``opening`` counted is closed: when it was the last of this process on the
    file, the emptying is on (``empty_indexes_at_close``) and the file's index was mapped for
    less than ``FRESH_S``, empty the index unless a connection of another process has it
    mapped. True when the index was emptied (or there was none), or its name handed to the
    helper (``empty_indexes_at_close``'s ``elsewhere``). A name never counted is left alone."""
    with _guard:
        held = _open_here.get(name, 0)
        if held != 1:
            if held > 1:
                _open_here[name] = held - 1
            return False  # others of this process have it open (or it was never counted)
        del _open_here[name]
        since = _since.pop(name)
        setlk = _OFD_SETLK
        if not _on or setlk is None or name in _kept or time.monotonic() - since >= FRESH_S:
            return False
        if _elsewhere:
            _pending.append(name)
            if len(_pending) < _BATCH or _helper is None:
                _rouse_sender()
                return True
        else:
            _busy.add(name)  # no connection of this process to it until the index is done
    if _elsewhere:
        send(wait=False)  # a full batch: now, unless another batch is being sent (then later)
        return True
    try:
        return _empty(name, setlk)
    finally:
        with _guard:
            _busy.discard(name)


def _empty_here(name: str) -> bool:
    """Empty ``name``'s index in this process (when the helper cannot take it), as ``closed``
    does, if no connection of this process has the file open again meanwhile."""
    setlk = _OFD_SETLK
    with _guard:
        if setlk is None or name in _open_here or name in _busy or name in _kept:
            return False
        _busy.add(name)
    try:
        return _empty(name, setlk)
    finally:
        with _guard:
            _busy.discard(name)


def _rouse_sender() -> None:
    """Have the sender's thread send what waits in ``_pending`` after ``_SEND_AFTER_S``
    (called under ``_guard``), starting it the first time."""
    if not _wake.is_set():
        _wake.set()
        if _sender is None:
            _start_sender()


def _start_sender() -> None:
    """The thread that sends what waits in ``_pending`` (called under ``_guard``)."""
    global _sender
    _sender = threading.Thread(target=_send_waiting, name="wal-index-sender", daemon=True)
    _sender.start()


def _send_waiting() -> None:
    while True:
        _wake.wait()
        time.sleep(_SEND_AFTER_S)
        send(woken=True)


def _helper_fd() -> int | None:
    """The helper's end of the pipe, starting the helper if there is none (under
    ``_send_lock``); None while it cannot be started."""
    global _helper, _down_until
    if _helper is not None:
        assert _helper.stdin is not None
        return _helper.stdin.fileno()
    if not _elsewhere or time.monotonic() < _down_until:
        return None  # switched off or into this process meanwhile, or within the restart's wait
    try:
        _helper = subprocess.Popen(
            [sys.executable, "-I", "-S", _HELPER, str(INDEX_KEPT_BYTES), str(_DMS_BYTE)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True)
    except OSError as e:
        _down_until = time.monotonic() + _RESTART_AFTER_S
        _log.warning("wal_index_helper_gone", why="it could not start", error=type(e).__name__,
                     retry_after_s=_RESTART_AFTER_S)
        return None
    assert _helper.stdin is not None
    fd = _helper.stdin.fileno()
    os.set_blocking(fd, False)  # a stalled helper never holds a close: emptied here instead
    return fd


def _helper_gone(why: str) -> None:
    """The helper died (or will not read): another is started after ``_RESTART_AFTER_S``. Said
    in the log with ``why`` and the helper's exit status (None: still running, not answering),
    so that a loss seen once (the indexes emptied by the closing process meanwhile) has a cause
    to read."""
    global _helper, _down_until, _unsettled
    proc, _helper = _helper, None
    _down_until = time.monotonic() + _RESTART_AFTER_S
    _unsettled = False
    if proc is not None:
        _close_helper(proc, wait=False)
        _log.warning("wal_index_helper_gone", why=why, exit_status=proc.returncode,
                     retry_after_s=_RESTART_AFTER_S)


def _close_helper(proc: subprocess.Popen[bytes], wait: bool) -> None:
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    if wait:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    else:
        proc.poll()  # reaped now if it has ended; else by the next Popen's cleanup


def _hand_over(batch: list[str]) -> None:
    """Hand ``batch`` to the helper; what it cannot take now (none running, its pipe full or
    broken) is emptied here. Under ``_send_lock`` (``send``), the emptying here too, so that a
    ``settle`` that gets the lock next finds every name of the batch done or with the helper."""
    global _unsettled
    here: list[str] = []
    names = [name.encode(_FS_ENCODING, "surrogateescape") + b"\0" for name in batch]
    start = 0
    while start < len(batch):
        fd = _helper_fd()
        if fd is None:
            here += batch[start:]
            break
        # Whole names, at most _PIPE_BUF bytes a write: each write is taken whole or not.
        end, size = start, 0
        while end < len(batch):
            size += len(names[end])
            if size > _PIPE_BUF and end > start:
                break
            end += 1
        data = b"".join(names[start:end])
        try:
            if len(data) > _PIPE_BUF:
                raise BlockingIOError  # one name past what a pipe takes whole
            os.write(fd, data)
            _unsettled = True
        except BlockingIOError:
            here += batch[start:end]
        except OSError:  # the helper ended: its pipe is broken
            _helper_gone("its pipe broke")
            here += batch[start:end]
        start = end
    for name in here:
        _empty_here(name)


def send(woken: bool = False, wait: bool = True) -> None:
    """Send what waits for the helper now, without waiting for it. The batch leaves
    ``_pending`` under ``_send_lock`` and is done (handed over, or emptied here) before the lock
    is let go, so a ``settle`` that takes the lock after it waits for that batch too (a node's
    stop that looked while the sender's thread held a batch returned before it was sent).
    ``wait=False`` (a close that filled a batch): when another batch holds the lock, the
    sender's thread sends this one after it, and the close goes on (that batch may be emptied
    here, a file at a time, when the helper is down or its pipe full)."""
    if not _send_lock.acquire(blocking=wait):
        with _guard:
            _rouse_sender()
        return
    try:
        with _guard:
            batch = _pending[:]
            _pending.clear()
            if woken:
                _wake.clear()
        if batch:
            _hand_over(batch)
    finally:
        _send_lock.release()


def settle(timeout: float = 10.0) -> bool:
    """Send what waits and wait until the helper has emptied (or left) every index handed to
    it (a node's stop, tests). True when it has, or nothing was handed over."""
    global _unsettled
    send()
    with _send_lock:
        proc = _helper
        if proc is None or not _unsettled:
            return True
        assert proc.stdin is not None and proc.stdout is not None
        try:
            _r, room, _x = select.select([], [proc.stdin.fileno()], [], timeout)
            if room:
                os.write(proc.stdin.fileno(), b"\0")
                ready, _w, _x = select.select([proc.stdout.fileno()], [], [], timeout)
            if not room or not ready or os.read(proc.stdout.fileno(), 1) != b".":
                _helper_gone("no answer to a settle" if room else "its pipe stayed full")
                return False
        except OSError:
            _helper_gone("its pipe broke")
            return False
        _unsettled = False
        return True


def unsettled() -> bool:
    """Whether names wait to be sent, are being sent, or were sent since the helper last said it
    had emptied every one before (``settle`` would wait)."""
    return bool(_pending) or _unsettled or _send_lock.locked()


def helper_pid() -> int | None:
    """The emptying helper's process id, while one runs."""
    proc = _helper
    return None if proc is None else proc.pid


def _stop_helper() -> None:
    """Send what waits, end the helper once it has emptied all (switching the emptying off or
    into this process, and at the interpreter's exit)."""
    global _helper, _unsettled
    settle()  # waits for a batch the sender's thread holds, as for what waits in ``_pending``
    with _send_lock:
        proc, _helper = _helper, None
        _unsettled = False
    if proc is not None:
        _close_helper(proc, wait=True)


atexit.register(_stop_helper)


def _locked_here(fd: int) -> bool:
    """Whether this process holds a POSIX lock on the DMS byte of the index open as ``fd``
    (``/proc/locks``; when it cannot be read, assume so)."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="ascii") as locks:
            text = locks.read()
    except OSError:
        return True
    inode = f":{st.st_ino} {_DMS_BYTE} "
    pid = f" {os.getpid()} "
    return any(pid in line and inode in line and line.split()[1] == "POSIX"
               for line in text.splitlines())


def _empty(name: str, setlk: int) -> bool:
    """Truncate ``name``'s index to ``INDEX_KEPT_BYTES`` under a write lock on its DMS byte;
    False when someone holds that byte (has the index mapped) or the file has other names."""
    try:
        if os.stat(name).st_nlink != 1:
            return False
        fd = os.open(name + "-shm", os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True  # no index (SQLite's own close removed it, or the file was removed)
    except OSError:
        return False
    try:
        try:
            fcntl.fcntl(fd, setlk, _WRITE_DMS)
        except OSError:
            # Mapped by someone else: another process's connection, or an uncounted one of this
            # process whose lock the close below drops: then never again for this file (above).
            if _locked_here(fd):
                with _guard:
                    _kept.add(name)
            return False
        os.ftruncate(fd, INDEX_KEPT_BYTES)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # the lock goes with it
