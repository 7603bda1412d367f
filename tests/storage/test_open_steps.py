"""An actor file opened in two steps (RT-2, RT-13, RT-14; issue 28's requests first): the first
(``connect_recovered``) looks at and connects the file and reads its runtime schema version, the
file's first read; ``open_actor_storage`` with ``connected`` finishes it with the same meta, alarm
and upgrades as the open in one step, and the first step reports a missing or damaged file as
that open does.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import pytest

import actors_for_tests as afs
from mailbox_actors.platform.storage import wal_index
from mailbox_actors.platform.storage.errors import StorageCorrupt
from mailbox_actors.platform.storage.limits import Durability, Limits
from mailbox_actors.platform.storage.opening import (
    Connected,
    OpenedAhead,
    connect_ahead,
    connect_recovered,
    open_actor_storage,
)
from mailbox_actors.platform.storage.runtime_access import RuntimeStorage
from mailbox_actors.platform.storage.sql import RUNTIME_SCHEMA_VERSION
from mailbox_actors.runtime.activation import META_KEYS
from mailbox_actors.testing import TestRuntime
from old_layout import to_previous_layout

pytestmark = pytest.mark.anyio


async def _scratch_file(tmp_path: Path) -> tuple[Path, int]:
    """A Scratch actor's file with its alarm a minute ahead, its node stopped; and the alarm."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        at = rt.now_ms() + 60_000
        oid = await afs.new_scratch(rt, "steps", alarm_at=at)
        path = rt.node.host.path_for("scratch", oid)
    return path, at


def _open(path: Path, connected: object = None) -> tuple[int | None, dict[str, str], bool]:
    """The stored alarm, meta and ``upgraded`` of an open (in one step, or finishing
    ``connected``), the file closed again."""
    opened = open_actor_storage(path, create=False, durability=Durability.NORMAL,
                                limits=Limits(), now_ms=lambda: 0, meta_keys=META_KEYS,
                                connected=connected)  # type: ignore[arg-type]
    assert opened is not None
    storage, meta = RuntimeStorage(opened[0]), opened[1]
    try:
        return storage.stored_alarm(), meta, opened[0].upgraded
    finally:
        storage.close()


async def test_the_two_steps_open_a_file_as_one_step_does(tmp_path: Path) -> None:
    """RT-2: the first step reads the current runtime schema version; finished, the open has the
    same alarm and meta as the open in one step; given up, it is closed as an actor is (ADR
    0012: the log kept for the next open)."""
    path, at = await _scratch_file(tmp_path)
    connected = connect_recovered(path, Durability.NORMAL)
    assert connected is not None
    assert connected.version == RUNTIME_SCHEMA_VERSION
    assert _open(path, connected) == _open(path)
    assert _open(path)[0] == at
    unused = connect_recovered(path, Durability.NORMAL)
    assert unused is not None
    unused.close(path)  # a first step given up: closed as an actor is, its count given back
    assert wal_index.key(path) not in wal_index._open_here
    assert path.with_name(path.name + "-wal").exists()  # the log kept, not checkpointed away


async def test_a_file_of_the_earlier_layout_is_upgraded_by_the_second_step(
        tmp_path: Path) -> None:
    """RT-14: a file of runtime schema 1 is read as version 1 by the first step and upgraded
    by the second, its alarm kept."""
    path, at = await _scratch_file(tmp_path)
    to_previous_layout(path)
    connected = connect_recovered(path, Durability.NORMAL)
    assert connected is not None and connected.version == 1
    alarm, _meta, upgraded = _open(path, connected)
    assert upgraded
    assert alarm == at


def test_no_file_is_none_and_a_damaged_one_is_corrupt(tmp_path: Path) -> None:
    """RT-13, REL-4: the first step finds no object where no file is (and leaves none behind),
    and reports a file that is no database as corrupt, as the open in one step does, naming
    what SQLite's first read found (its result code, never its message)."""
    missing = tmp_path / "missing.sqlite"
    assert connect_recovered(missing, Durability.NORMAL) is None
    assert not missing.exists()
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database " * 400)
    with pytest.raises(StorageCorrupt) as refused:
        connect_recovered(damaged, Durability.NORMAL)
    assert refused.value.details == {"storage": "SQLITE_NOTADB"}  # what SQLite's read found
    with pytest.raises(StorageCorrupt) as refused:
        open_actor_storage(damaged, create=False, durability=Durability.NORMAL, limits=Limits(),
                           now_ms=lambda: 0)
    assert refused.value.details == {"storage": "SQLITE_NOTADB"}
    assert wal_index.key(damaged) not in wal_index._open_here


def test_an_empty_file_is_corrupt_and_its_log_is_kept(tmp_path: Path) -> None:
    """OPS-2, REL-4: an actor file cut to zero bytes is refused as damaged, by either step and by
    the open made ahead, before SQLite reads it (SQLite's first read of an empty database
    deletes the log beside it, which may hold the object's pages): the log stays for an
    operator."""
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    log = tmp_path / "empty.sqlite-wal"
    log.write_bytes(b"pages " * 1000)
    with pytest.raises(StorageCorrupt):
        connect_recovered(path, Durability.NORMAL)
    with pytest.raises(StorageCorrupt):
        open_actor_storage(path, create=True, durability=Durability.NORMAL, limits=Limits(),
                           now_ms=lambda: 0)
    assert connect_ahead(path, Durability.NORMAL, Limits(), META_KEYS) is None
    assert log.read_bytes() == b"pages " * 1000
    assert path.read_bytes() == b""
    assert wal_index.key(path) not in wal_index._open_here



def _update_wrapper_misses(open_file: Callable[[], object]) -> tuple[object, list[str]]:
    """What ``open_file`` returned, and the names ``functools.update_wrapper`` failed to read
    meanwhile (an AttributeError raised and caught in it): CPython 3.11 wraps every new
    connection in ``functools.lru_cache``, its statement cache."""
    misses: list[str] = []

    def local(frame: FrameType, event: str, arg: object) -> object:
        if event == "exception":
            misses.append(frame.f_locals.get("attr", "?"))
        return local

    def calls(frame: FrameType, event: str, arg: object) -> object:
        return local if frame.f_code.co_name == "update_wrapper" else None

    before = sys.gettrace()
    sys.settrace(calls)  # type: ignore[arg-type]
    try:
        opened = open_file()
    finally:
        sys.settrace(before)  # a debugger's or coverage's tracer, if one was there
    return opened, misses


async def test_an_actor_connection_costs_its_statement_cache_one_missing_name(
        tmp_path: Path) -> None:
    """RT-2: an actor file's connection, made on the loop or ahead in a thread, has the names the
    statement cache's ``update_wrapper`` copies but ``__qualname__`` (which a class cannot
    hold), so its making raises one AttributeError there, not three or more (about 8 K instructions an
    open; a bare ``sqlite3.Connection`` misses ``__name__`` and ``__annotations__`` too)."""
    path, _at = await _scratch_file(tmp_path)
    bare, bare_misses = _update_wrapper_misses(lambda: sqlite3.connect(path))
    bare.close()  # type: ignore[attr-defined]
    assert {"__name__", "__qualname__", "__annotations__"} <= set(bare_misses)
    connected, misses = _update_wrapper_misses(
        lambda: connect_recovered(path, Durability.NORMAL))
    assert misses == ["__qualname__"]
    assert isinstance(connected, Connected)
    connected.close(path)
    ahead, misses = _update_wrapper_misses(
        lambda: connect_ahead(path, Durability.NORMAL, Limits(), META_KEYS))
    assert misses == ["__qualname__"]
    assert isinstance(ahead, OpenedAhead)
    ahead.close(path)
    assert _open(path)[0] is not None  # the file opens and reads as before
