"""Opening an actor's SQLite file (RT-2, RT-13, RT-14): create or open, the runtime's own schema
(and its upgrade from the earlier layout), durability, foreign keys and workerd's limits.

Probing an unknown id never leaves a file behind; a file that exists but cannot be opened now is
``StorageUnavailable`` (retryable), one that is not a usable database ``StorageCorrupt``.

An object exists exactly when its file does (OPS-2, REL-4): a new file is built aside with the
runtime schema and moved into place whole, so a file at an object's path that is empty, cut short or
without the runtime schema is a damaged object, never a new one for the next ``init`` to take over.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote_from_bytes

from mailbox_actors.platform.memory import PAGE_CACHE_KIB
from mailbox_actors.platform.sqlite_files import create_whole
from mailbox_actors.platform.storage.allowlist import SQLITE_LIMITS
from mailbox_actors.platform.storage.connection import RUNTIME_TOKEN
from mailbox_actors.platform.storage.errors import StorageCorrupt, StorageUnavailable
from mailbox_actors.platform.storage.handle import close_connection, shed_caches
from mailbox_actors.platform.storage.hooks import AlarmSink, TransactionHooks
from mailbox_actors.platform.storage.known import KnownSchema
from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.sql import RUNTIME_SCHEMA_VERSION, SqlStorage
from mailbox_actors.platform.storage.transactions import PAST_CAP_KEY
from mailbox_actors.platform.storage.wal_index import closed, key, opening

__all__ = ["CACHED_STATEMENTS", "LAYOUT_QUERY", "OUTBOX_TABLE", "RUNTIME_TABLES", "Connected",
           "Connecting", "OpenedAhead", "SchemaLayout", "StorageUnavailable", "connect_ahead",
           "connect_file", "connect_recovered", "fresh_layout",
           "open_actor_storage", "open_storage", "schema_layout", "schema_text"]

# Prepared statements kept per connection (LRU): each costs a few KB of SQLite heap, so a large
# cache would dominate an open actor's memory (ADR 0012); an object's hot statements fit in it.
CACHED_STATEMENTS = 64
# Characters quote_from_bytes leaves as they are (its safe set, with '/'): such a path is its URI.
_URI_PLAIN = re.compile(r"[A-Za-z0-9_.\-~/]*")


_RUNTIME_META = "CREATE TABLE IF NOT EXISTS _ma_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID"
# The runtime's outbox (EV-1, runtime/outbox.py), one layout in every object's file: keyed by the
# sequence alone (no index on the event id, none on dispatched_at: an event writes one b-tree
# page). Not a ``_ma_`` table: an object reads its own events with actor SQL (``read_events``).
OUTBOX_TABLE = ("CREATE TABLE IF NOT EXISTS outbox (sequence INTEGER PRIMARY KEY, id TEXT NOT NULL, "
                "type TEXT NOT NULL, occurred_at_ms INTEGER NOT NULL, body BLOB NOT NULL, "
                "dispatched_at INTEGER)")
# Every table the runtime makes in an actor's file, in the order it makes them.
RUNTIME_TABLES = (
    _RUNTIME_META,
    "CREATE TABLE IF NOT EXISTS _ma_alarm (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "at_ms INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS _ma_kv (k TEXT PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID",
    OUTBOX_TABLE,
)
_RUNTIME_SCHEMA = (*RUNTIME_TABLES, f"PRAGMA user_version = {RUNTIME_SCHEMA_VERSION}")
# The runtime's keys, which runtime schema 1 kept in a user-visible ``meta`` (RT-14).
_RUNTIME_KEYS = ("k IN ('schema_version', 'owner_tenant', 'owner_identity', 'erased', 'event_seq') "
                 "OR k GLOB 'alarm:*'")
# Runtime schema 1 -> 2: the runtime's keys move from ``meta`` into ``_ma_meta``, out of reach of
# user SQL; whatever else the actor put in ``meta`` stays there, and a ``meta`` left empty is
# dropped so the actor may create its own (the platform objects' migrations recreate theirs).
_FROM_1 = (
    _RUNTIME_META,
    f"INSERT OR REPLACE INTO _ma_meta (k, v) SELECT k, v FROM meta WHERE ({_RUNTIME_KEYS}) "
    "AND v IS NOT NULL",
    f"DELETE FROM meta WHERE {_RUNTIME_KEYS}",
)
# Runtime schema 2 -> 3: the outbox becomes the runtime's. Under 2 an object that emitted events
# listed it in its own migrations, in the first layout (a UNIQUE event id and an index on the
# undispatched) or rebuilt lean; a file holding it in another layout than OUTBOX_TABLE's has it
# rebuilt so with its rows, and one without it gets it.
_OUTBOX_COLUMNS = ["sequence", "id", "type", "occurred_at_ms", "body", "dispatched_at"]
_OUTBOX_REBUILD = (
    OUTBOX_TABLE.replace("EXISTS outbox ", "EXISTS _ma_outbox_rebuilt "),
    "INSERT INTO _ma_outbox_rebuilt (sequence, id, type, occurred_at_ms, body, dispatched_at) "
    "SELECT sequence, id, type, occurred_at_ms, body, dispatched_at FROM outbox",
    "DROP TABLE outbox",
    "ALTER TABLE _ma_outbox_rebuilt RENAME TO outbox",
)


def _create(path: Path, durability: str) -> None:
    """A new object's file, whole, at ``path`` (nothing is there: one node owns the id)."""
    for log in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        # Left by a removal a crash cut short: a log never belongs to a new file.
        log.unlink(missing_ok=True)
    try:
        create_whole(path, _RUNTIME_SCHEMA, fsync=durability == Durability.FULL)
    except (sqlite3.OperationalError, OSError) as e:  # out of descriptors or space: retry later
        raise StorageUnavailable(type(e).__name__) from e


class _ActorConnection(sqlite3.Connection):
    """An actor file's connection: ``sqlite3.Connection`` with the names ``functools.update_wrapper``
    copies. CPython 3.11's ``Connection.__init__`` wraps the connection in ``functools.lru_cache``
    (its statement cache), whose ``update_wrapper`` reads the wrapped object's ``__name__``,
    ``__qualname__`` and ``__annotations__``: each one missing raises an ``AttributeError`` that
    formats its message, about 8 K instructions at every open for the two given here (callgrind;
    ``__qualname__`` cannot be a class attribute: ``type`` takes it from the class body).
    Nothing else reads them; no slot added, so the object's layout is the base's
    (``handle``)."""

    __slots__ = ()
    __name__ = "Connection"
    __annotations__ = {}  # read once by update_wrapper, never written
    __type_params__ = ()  # copied too from Python 3.12 on


def _file_uri(name: str) -> str:
    """``name`` as a URI that opens the file read-write and never creates it; the path is escaped
    as Path.as_uri does ('#', '%', '?'), unless no character of it needs escaping (an actor
    file's path under a plain data dir)."""
    uri = name if _URI_PLAIN.fullmatch(name) else quote_from_bytes(os.fsencode(name))
    return "file://" + uri + "?mode=rw"


def _connect(path: str | Path, create: bool, durability: str,
             ) -> tuple[sqlite3.Connection | None, bool]:
    """The file's connection (None: no such object), and whether this call made the file.
    ``path``: an absolute path text (the host's), or a Path."""
    name = path if isinstance(path, str) else os.fspath(path.absolute())
    made = False
    counted = key(name)
    # Counted before it exists: ``wal_index`` never empties an index under it. The file is
    # looked at without a descriptor of it: closing one would drop every POSIX lock this
    # process holds on the database, an embedding program's own connection's shared lock too
    # (review s19 O15). A ``stat`` says whether it exists and is empty; SQLite's first read
    # checks the header itself (not a database, cut short: ``StorageCorrupt`` there, before
    # any write). An empty file is refused here, since that read would delete its log.
    opening(counted)
    try:
        try:
            size = os.stat(name).st_size
        except FileNotFoundError:
            if not create:
                closed(counted)
                return None, False  # no such object: the caller answers *_not_found
            _create(Path(name), durability)
            size, made = 1, True
        except OSError:
            size = 1  # not to be looked at now (permissions): the connect says why
        if not size:
            raise StorageCorrupt("it is empty (zero bytes)")
        return sqlite3.connect(_file_uri(name), uri=True, isolation_level=None,
                               cached_statements=CACHED_STATEMENTS,
                               factory=_ActorConnection), made
    except sqlite3.OperationalError as e:
        closed(counted)
        if not os.path.exists(name):
            return None, False  # no such object: the caller answers *_not_found
        raise StorageUnavailable(type(e).__name__) from e
    except BaseException:
        closed(counted)
        raise


def _settings_script(durability: str) -> str:
    """The open-time PRAGMAs, as one script: executescript keeps none of them in the statement
    cache, where each would hold a prepared statement for the connection's life (ADR 0012).
    Not the page limit: its PRAGMA is a read transaction of its own (about 6 us an open, most
    of it the log's read locks), and only a write can grow the file, so it is set in the
    connection's first write transaction (``Transactions._cap_pages``)."""
    return (
        # workerd builds SQLite with foreign keys enforced; an actor may still turn them off.
        "PRAGMA foreign_keys = ON; "
        # A busy actor's page cache stays within the memory budget max_active_actors is
        # derived from (platform/memory.py); pages past it are read again from the OS cache.
        f"PRAGMA cache_size = -{PAGE_CACHE_KIB}; "
        f"PRAGMA synchronous = {'FULL' if durability == Durability.FULL else 'NORMAL'};")


class OpenedAhead(NamedTuple):
    """A connection ``connect_ahead`` made, with the file's first read done (alarm, meta) and
    what that read left cached shed."""

    conn: sqlite3.Connection
    first: tuple[int | None, dict[str, str]]

    def close(self, path: Path) -> None:
        """Close the connection unused (its count given back, ``wal_index``: a plain
        ``conn.close()`` leaves the file's index as SQLite leaves it from then on)."""
        _close(self.conn, key(path))


def connect_ahead(path: Path, durability: str, limits: Limits,
                  meta_keys: tuple[str, ...]) -> OpenedAhead | None:
    """An existing actor file's connection, made in a worker thread for ``open_actor_storage``
    (``ahead``) to finish on the event loop: the file opened, its write-ahead log recovered into
    a new ``-shm``, its schema read, the runtime's first read and version check done and the
    open-time settings made, which is where an evicted actor's open waits for the disk (SQLite
    releases the GIL meanwhile). What those reads left cached (pages, statements) is shed here
    too (``shed_caches``, as the loop's open does when it is done): on the loop each statement's
    finalize and the ctypes call are as many points where a waiting thread takes the GIL. None
    when the file is absent, empty (SQLite's first read would delete its log), damaged, refusing
    now or of another runtime schema, and the open on the loop looks at it as always, upgrades
    it or reports why. It only reads, as that open would."""
    name = os.fspath(path.absolute())
    try:
        if not os.stat(name).st_size:
            return None
    except OSError:
        return None
    counted = key(name)
    opening(counted)  # given back by the connection's close (``handle.close_connection``)
    try:
        conn = sqlite3.connect(_file_uri(name), uri=True,
                               isolation_level=None, cached_statements=CACHED_STATEMENTS,
                               check_same_thread=False, factory=_ActorConnection)
    except sqlite3.Error:
        closed(counted)
        return None
    try:
        first = _first_read(conn, meta_keys)
        if first is None or \
                conn.execute("PRAGMA user_version").fetchone()[0] != RUNTIME_SCHEMA_VERSION:
            _close(conn, counted)
            return None
        conn.executescript(_setup(durability, limits)[0])
        shed_caches(conn, path, CACHED_STATEMENTS)
    except sqlite3.Error:
        _close(conn, counted)
        return None
    return OpenedAhead(conn, first)


def _close(conn: sqlite3.Connection, counted: str) -> None:
    """Close a connection an open gave up on, or made and did not use, as an evicted actor's
    closes: the log kept (ADR 0012; SQLite's own close would checkpoint it, with its fsyncs),
    its count given back and its index emptied (``wal_index``)."""
    close_connection(conn, counted, keep_wal=True)


class Connected(NamedTuple):
    """An existing actor file's connection made on the event loop by ``connect_recovered``, with
    its runtime schema version read: the open's steps before the rest (``open_actor_storage``
    with ``connected``)."""

    conn: sqlite3.Connection
    version: int

    def close(self, path: str | Path) -> None:
        """Close the connection unused, as an actor's is closed (``close_connection``: the log
        kept, the count given back). A plain close that is the file's last would checkpoint the
        log into the file and delete it, with syncs, on the loop (review O11)."""
        close_connection(self.conn, path, keep_wal=True)


class Connecting(NamedTuple):
    """An existing actor file looked at and connected on the event loop by ``connect_file``,
    nothing read yet: the open's first step. ``recovered`` is the second."""

    conn: sqlite3.Connection

    def recovered(self, path: str | Path) -> Connected:
        """The file's runtime schema version read: its first read, where SQLite rebuilds the
        ``-shm`` index from the write-ahead log. Raises as ``open_actor_storage`` does and
        closes the connection if it does."""
        conn = self.conn
        try:
            return Connected(conn, conn.execute("PRAGMA user_version").fetchone()[0])
        except BaseException as e:
            _close(conn, key(path))
            if isinstance(e, sqlite3.OperationalError):  # locked, out of descriptors, I/O: retry
                raise StorageUnavailable(type(e).__name__) from e
            if isinstance(e, sqlite3.DatabaseError):
                raise StorageCorrupt(_found(e)) from e
            raise

    def close(self, path: str | Path) -> None:
        """Close the connection unused, as ``Connected.close`` does."""
        close_connection(self.conn, path, keep_wal=True)


def connect_file(path: str | Path, durability: str) -> Connecting | None:
    """The first step of an existing actor file's open on the event loop: the file looked at and
    connected, nothing read (about a third of the open's steps before the rest; the version
    read after it, ``Connecting.recovered``, rebuilds the ``-shm`` index from the log and is
    the longest). None: no such file. Raises as ``open_actor_storage`` does."""
    conn, _made = _connect(path, False, durability)  # raises StorageUnavailable itself
    return None if conn is None else Connecting(conn)


def connect_recovered(path: str | Path, durability: str) -> Connected | None:
    """``connect_file`` and ``Connecting.recovered`` at once: the file looked at and connected,
    and its runtime schema version read. That read is the file's first, where SQLite rebuilds
    the ``-shm`` index from the write-ahead log (most of an evicted actor's open), so the rest
    (``open_actor_storage`` with ``connected``: the first read of the meta and alarm, the
    settings, the storage) is a step about as long: a caller on the loop lets other work run
    between them (the host: requests first, ADR 0023). None: no such file. Raises as
    ``open_actor_storage`` does; closes the connection if it does."""
    connecting = connect_file(path, durability)
    return None if connecting is None else connecting.recovered(path)


def _meta_query(keys: Sequence[str]) -> str:
    """The runtime meta ``keys`` (written into the text, as ``RuntimeStorage.meta`` does)."""
    quoted = ", ".join("'" + k.replace("'", "''") + "'" for k in keys) or "NULL"
    return f"SELECT k, v FROM _ma_meta WHERE k IN ({quoted})"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_FIRST_READS: dict[tuple[tuple[str, ...], bool], str] = {}  # per meta keys and alarm or not


def _first_read(conn: sqlite3.Connection, meta_keys: tuple[str, ...], alarm: bool = True,
                ) -> tuple[int | None, dict[str, str]] | None:
    """The runtime meta ``meta_keys`` (and the stored alarm, when ``alarm``) in one statement
    (the file's first read), or None when the file has no ``_ma_meta`` (the runtime schema 1
    layout, or no schema at all: the caller looks at ``user_version`` alone). Its text carries
    the runtime's token, so the cached statement is never one actor SQL can name. Without
    ``alarm`` the alarm is None here: a request's activation reads it at its first use
    (``Transactions._stored``), which most requests never make.

    The keys are read as every key from the least of them on (one seek, then the few runtime
    keys there: the alarm purposes' ``alarm:*`` sort before them): an ``IN`` list costs SQLite
    an ephemeral index and a seek per key (about 50 K instructions more at every activation),
    and a ``BETWEEN`` range about 12 K more to prepare and run than this open-ended one. The
    other runtime keys it brings (``event_seq`` and such) are left in the dict: its readers
    look up their own keys."""
    query = _FIRST_READS.get((meta_keys, alarm))
    if query is None:
        meta = f"SELECT k, v FROM _ma_meta WHERE k >= {_quoted(min(meta_keys))}" \
            if meta_keys else ""
        # No WHERE: the table holds at most its one row (CHECK (id = 1)), and a constraint
        # costs the prepare more than the scan of one row does.
        parts = (["SELECT NULL, at_ms FROM _ma_alarm"] if alarm else []) + \
            ([meta] if meta else [])
        query = " UNION ALL ".join(parts or ["SELECT NULL, NULL WHERE 0"])
        query = f"{query} /*{RUNTIME_TOKEN}*/"
        if len(_FIRST_READS) < 64:
            _FIRST_READS[(meta_keys, alarm)] = query
    try:
        found = dict(conn.execute(query).fetchall())
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return None
        raise
    return found.pop(None, None), found


Setup = tuple[str, tuple[int, ...], tuple[int, ...]]  # the PRAGMAs; SQLite's limits, values
_SETUPS: dict[tuple[str, Limits], Setup] = {}


def _setup(durability: str, limits: Limits) -> Setup:
    """What every connection is set up with, made once per durability and limits: the open-time
    PRAGMAs (``_settings_script``) and SQLite's limits (set with one ``map``: a loop in Python
    was 100 bytecodes an open)."""
    made = _SETUPS.get((durability, limits))
    if made is None:
        script = _settings_script(durability)
        settings = ((sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limits.max_bound_parameters),
                    (sqlite3.SQLITE_LIMIT_SQL_LENGTH, limits.max_statement_bytes),
                    (sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes),
                    (sqlite3.SQLITE_LIMIT_COLUMN, limits.max_columns),
                    *((limit, value) for limit, value, _name in SQLITE_LIMITS))
        made = (script, tuple(k for k, _v in settings), tuple(v for _k, v in settings))
        if len(_SETUPS) < 64:
            _SETUPS[(durability, limits)] = made
    return made


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Runtime schema ``version`` (1 or 2) -> the current one (RT-14), in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if version == 1:
            for stmt in _FROM_1:
                conn.execute(stmt)
            if conn.execute("SELECT 1 FROM meta LIMIT 1").fetchone() is None:
                conn.execute("DROP TABLE meta")
        _outbox_from_2(conn)
        conn.execute(f"PRAGMA user_version = {RUNTIME_SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _outbox_from_2(conn: sqlite3.Connection) -> None:
    """Runtime schema 2 -> 3 (``_OUTBOX_REBUILD``'s comment), inside the upgrade's transaction.
    A table named ``outbox`` without the outbox's columns is the actor's own: the name is the
    runtime's now, so the file is refused (``StorageCorrupt``) rather than taken over."""
    found = conn.execute("SELECT type, sql FROM sqlite_master WHERE tbl_name = 'outbox'").fetchall()
    if not found:
        conn.execute(OUTBOX_TABLE)
        return
    columns = [row[1] for row in conn.execute("PRAGMA table_info(outbox)")]
    if columns != _OUTBOX_COLUMNS:
        raise StorageCorrupt("the actor's own table 'outbox' has another layout than the "
                             "runtime's outbox of that name (runtime schema 3)")
    lean = schema_text(OUTBOX_TABLE)
    if [(kind, schema_text(sql or "")) for kind, sql in found] != [("table", lean)]:
        for stmt in _OUTBOX_REBUILD:  # another layout, or indexes or triggers on it
            conn.execute(stmt)


SchemaLayout = frozenset[tuple[str, str, str, str]]  # (type, name, table, its text)


def schema_text(sql: str) -> str:
    """A schema entry's text as SQLite keeps it, compared without quotes, spacing differences or
    ``IF NOT EXISTS`` (SQLite keeps a renamed table's name quoted, and drops the clause)."""
    text = re.sub(r"\s+", " ", sql.replace('"', "")).strip()
    return re.sub(r"^CREATE (TABLE|INDEX|VIEW|TRIGGER) IF NOT EXISTS ", r"CREATE \1 ", text,
                  flags=re.IGNORECASE)


def schema_layout(rows: Iterable[tuple[str, str, str, str | None]]) -> SchemaLayout:
    """``sqlite_master``'s rows (type, name, tbl_name, sql) as a comparable layout."""
    return frozenset((kind, name, table, schema_text(sql or "")) for kind, name, table, sql in rows
                     if not name.startswith("sqlite_"))


LAYOUT_QUERY = "SELECT type, name, tbl_name, sql FROM sqlite_master"


def fresh_layout(statements: Sequence[str]) -> SchemaLayout | None:
    """The layout of a new actor file after ``statements`` (its migrations up to a version),
    built in memory; None when they do not run there."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for stmt in (*RUNTIME_TABLES, *statements):
            conn.execute(stmt)
        return schema_layout(conn.execute(LAYOUT_QUERY).fetchall())
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def open_storage(path: str | Path, *, create: bool, durability: str, limits: Limits,
                 now_ms: Callable[[], int], hooks: TransactionHooks | None = None,
                 alarm_sink: AlarmSink | None = None) -> SqlStorage | None:
    """Open (or create) an actor's file. Returns None when it does not exist and ``create`` is
    False, so probing an unknown id never leaves a file behind. A file that exists but cannot be
    opened now raises ``StorageUnavailable`` (retryable); an unreadable one ``StorageCorrupt``."""
    opened = open_actor_storage(path, create=create, durability=durability, limits=limits,
                                now_ms=now_ms, hooks=hooks, alarm_sink=alarm_sink)
    return None if opened is None else opened[0]


def open_actor_storage(path: str | Path, *, create: bool, durability: str, limits: Limits,
                       now_ms: Callable[[], int], hooks: TransactionHooks | None = None,
                       alarm_sink: AlarmSink | None = None, meta_keys: tuple[str, ...] = (),
                       ahead: OpenedAhead | None = None, alarm: bool = True,
                       known: KnownSchema | None = None, connected: Connected | None = None,
                       ) -> tuple[SqlStorage, dict[str, str]] | None:
    """``open_storage``, and the stored values of the runtime meta ``meta_keys`` (absent ones left
    out; other runtime keys between them may be there too), read with the file's version (and
    its alarm, when ``alarm``; otherwise it is read at its first use) in its first statement.
    ``ahead``: the file's connection made by ``connect_ahead`` (first read, version check and
    settings done), finished here (closed if this fails). ``connected``: the file's connection
    and version from ``connect_recovered`` (the open's first step), finished here the same way.
    ``known``: the schema the file has when its meta says so (``known``): then its storage is
    made knowing it, with no authorizer."""
    made = False
    if ahead is not None:
        conn: sqlite3.Connection | None = ahead.conn
    elif connected is not None:
        conn = connected.conn
    else:
        conn, made = _connect(path, create, durability)  # raises StorageUnavailable itself
    if conn is None:
        return None
    try:
        script, kinds, values = _setup(durability, limits)
        first: tuple[int | None, dict[str, str]] | None
        if ahead is not None:
            first, alarm = ahead.first, True
        else:
            first = _prepare(conn, meta_keys, script, alarm,
                             None if connected is None else connected.version)
        conn.row_factory = sqlite3.Row  # for the actor's code (the runtime's rows were tuples)
        list(map(conn.setlimit, kinds, values))
        if first is None:  # upgraded from an earlier runtime schema just now: read again
            storage = SqlStorage(conn, path, limits, now_ms, hooks, alarm_sink)
            storage.upgraded = True
            meta = dict(storage._runtime_exec(_meta_query(meta_keys))) if meta_keys else {}
        else:
            meta = first[1]
            storage = SqlStorage(conn, path, limits, now_ms, hooks, alarm_sink,
                                 (first[0],) if alarm else None,
                                 None if known is None else known.facts(meta))
            if meta_keys and PAST_CAP_KEY not in meta:  # the first read brings it, if set
                storage._past_cap = False
        # Closing keeps the write-ahead log for the next open (ADR 0012): no checkpoint, no fsync
        # (``close_connection`` sets it then).
        storage.keeps_wal = True
        storage.made = made
        return storage, meta
    except BaseException as e:
        _close(conn, key(path))  # never leave a descriptor behind for the garbage collector
        if isinstance(e, sqlite3.OperationalError):  # locked, out of descriptors, I/O: retry
            raise StorageUnavailable(type(e).__name__) from e
        if isinstance(e, sqlite3.DatabaseError):
            raise StorageCorrupt(_found(e)) from e
        raise


def _found(e: sqlite3.DatabaseError) -> str:
    """What SQLite found wrong with a file, as its result code's name (``SQLITE_NOTADB``: not a
    database; ``SQLITE_CORRUPT``: cut short or damaged inside): its first read is the header
    check (``_connect``). A code, never SQLite's message, which may quote the schema."""
    return getattr(e, "sqlite_errorname", None) or type(e).__name__


def _prepare(conn: sqlite3.Connection, meta_keys: tuple[str, ...], script: str,
             alarm: bool, version: int | None = None,
             ) -> tuple[int | None, dict[str, str]] | None:
    """The open on the loop, after the connect: the version check (and the upgrade from an
    earlier runtime schema), the first read, the open-time settings. ``version``: read already
    (``connect_recovered``). Returns the first read, or None when it is to be made from the
    upgraded layout (by the caller).

    The version is the file's first statement: a plain PRAGMA, not pragma_user_version in the
    first read (that table-valued function is a virtual table SQLite builds, parsing its
    declaration, on every connection); whichever read comes first is where SQLite rebuilds the
    ``-shm`` index from the log (most of an evicted actor's open), and the version is checked
    before any runtime table is named, so a newer or an earlier layout never fails the read."""
    if version is None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    _check_version(version)
    first: tuple[int | None, dict[str, str]] | None
    if version < RUNTIME_SCHEMA_VERSION:
        _upgrade(conn, version)
        first = None  # read by the caller, from the upgraded layout
    else:
        first = _first_read(conn, meta_keys, alarm)
    conn.executescript(script)
    return first


def _check_version(version: int) -> None:
    if version == 0:
        # Every file this code makes has the schema before it is at this path: one without
        # it was cut short or overwritten (SQLite reads a short first page as an empty file).
        raise StorageCorrupt("the file has no runtime schema (empty or truncated)")
    if version > RUNTIME_SCHEMA_VERSION:
        raise StorageCorrupt(f"runtime schema {version} is newer than this code knows")
