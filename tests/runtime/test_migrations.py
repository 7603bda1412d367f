"""Meta and versioned migrations (RT-8): applied in order in one transaction, never downgraded."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

import actors_for_tests as afs
from mailbox_actors.runtime.actor import Actor
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError

T = afs.TENANT


def schema_version_on_disk(path: Path) -> str | None:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        row = conn.execute("SELECT v FROM _ma_meta WHERE k = 'schema_version'").fetchone()
        return None if row is None else row[0]


@pytest.mark.anyio
async def test_migrations_apply_in_order_on_a_new_and_an_old_file(tmp_path: Path) -> None:
    """RT-8: a new file gets every migration in order; a file written by version 1 of the code is
    brought to version 2 on its first access, its rows kept, meta.schema_version recording it."""
    async with TestRuntime(tmp_path, objects=(afs.MigV1,)) as rt:
        old = rt.id_from_name("migr", "old")
        await rt.call("migr", old, afs.MInit(), tenant_id=T)
        await rt.call("migr", old, afs.MAdd(a="row-from-v1"), tenant_id=T)
        info = await rt.call("migr", old, afs.MInfo(), tenant_id=T)
        assert info["schema_version"] == 1 and info["columns"] == ["a"]
        path = rt.node.host.path_for("migr", old)
    assert schema_version_on_disk(path) == "1"

    async with TestRuntime(tmp_path, objects=(afs.MigV2,)) as rt:
        info = await rt.call("migr", old, afs.MInfo(), tenant_id=T)
        assert info["schema_version"] == 2
        assert info["columns"] == ["a", "b"]
        assert info["rows"] == [["row-from-v1", "from-v2"]]
        assert "t2" in info["tables"] and "meta" not in info["tables"]  # RT-14: the runtime's is hidden

        new = rt.id_from_name("migr", "new")
        await rt.call("migr", new, afs.MInit(), tenant_id=T)
        info = await rt.call("migr", new, afs.MInfo(), tenant_id=T)
        assert info["schema_version"] == 2 and info["columns"] == ["a", "b"]
    assert schema_version_on_disk(path) == "2"


@pytest.mark.anyio
async def test_failed_migration_rolls_back_whole(tmp_path: Path) -> None:
    """RT-8: pending migrations run in one transaction: if a statement fails, none of them is
    applied, the file stays at its version, and the actor answers internal_error."""
    async with TestRuntime(tmp_path, objects=(afs.MigV1,)) as rt:
        oid = rt.id_from_name("migr", "a")
        await rt.call("migr", oid, afs.MInit(), tenant_id=T)
        await rt.call("migr", oid, afs.MAdd(a="kept"), tenant_id=T)
        path = rt.node.host.path_for("migr", oid)

    async with TestRuntime(tmp_path, objects=(afs.MigV2Broken,)) as rt:
        with pytest.raises(MailboxActorsError) as e:
            await rt.call("migr", oid, afs.MInfo(), tenant_id=T)
        assert e.value.code == "internal_error"

    assert schema_version_on_disk(path) == "1"
    async with TestRuntime(tmp_path, objects=(afs.MigV1,)) as rt:
        info = await rt.call("migr", oid, afs.MInfo(), tenant_id=T)
        assert info["columns"] == ["a"] and info["rows"] == [["kept"]]


@pytest.mark.anyio
async def test_file_newer_than_the_code_is_refused_not_downgraded(tmp_path: Path) -> None:
    """RT-8: a file whose schema_version is newer than the code knows is refused with
    internal_error and left as it is; other actors of the namespace keep working."""
    async with TestRuntime(tmp_path, objects=(afs.MigV2,)) as rt:
        oid = rt.id_from_name("migr", "newer")
        await rt.call("migr", oid, afs.MInit(), tenant_id=T)
        await rt.call("migr", oid, afs.MAdd(a="v2 data"), tenant_id=T)
        path = rt.node.host.path_for("migr", oid)

    async with TestRuntime(tmp_path, objects=(afs.MigV1,)) as rt:
        for req in (afs.MInfo(), afs.MAdd(a="x"), afs.MInit()):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call("migr", oid, req, tenant_id=T)
            assert e.value.code == "internal_error"
            assert e.value.retryable
        # Another actor of the same namespace, at the version the code knows, works.
        fresh = rt.id_from_name("migr", "fresh")
        await rt.call("migr", fresh, afs.MInit(), tenant_id=T)
        assert (await rt.call("migr", fresh, afs.MInfo(), tenant_id=T))["schema_version"] == 1

    assert schema_version_on_disk(path) == "2"
    async with TestRuntime(tmp_path, objects=(afs.MigV2,)) as rt:
        info = await rt.call("migr", oid, afs.MInfo(), tenant_id=T)
        assert info["rows"] == [["v2 data", "from-v2"]]


def _class_with(migrations: tuple[Migration, ...]) -> type[Actor]:
    return type("BadMig", (afs.MigBase,), {"migrations": migrations})


@pytest.mark.parametrize("migrations", [
    (Migration(2, ("CREATE TABLE b (x)",)), Migration(1, ("CREATE TABLE a (x)",))),
    (Migration(1, ("CREATE TABLE a (x)",)), Migration(3, ("CREATE TABLE c (x)",))),
    (Migration(1, ("CREATE TABLE a (x)",)), Migration(1, ("CREATE TABLE b (x)",))),
    (Migration(0, ("CREATE TABLE a (x)",)),),
], ids=["backwards", "gap", "duplicate", "zero"])
def test_migration_list_out_of_order_is_refused_at_registration(
        tmp_path: Path, migrations: tuple[Migration, ...]) -> None:
    """RT-8: a migration list not numbered 1, 2, 3... (backwards, with a gap, a duplicate) is
    refused when the class is registered, before any file is touched."""
    with pytest.raises(ValueError, match="numbered"):
        TestRuntime(tmp_path, objects=(_class_with(migrations),))
    assert list(tmp_path.iterdir()) == []
