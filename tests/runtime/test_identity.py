"""Actor identity (RT-1) and the router's refusal of bad ids and namespaces (RPC-6)."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

import actors_for_tests as afs
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.quota import QuotaInit, QuotaStatus

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def inside(path: Path, root: Path) -> bool:
    return path.is_file() and path.resolve().is_relative_to(root.resolve())


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.anyio
async def test_id_from_name_is_deterministic_and_per_namespace(tmp_path: Path) -> None:
    """RT-1: id_from_name gives the same 64-hex id for a name every time, and restart, and a
    different id in another namespace."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = rt.id_from_name("scratch", "alice")
        assert HEX64.match(a)
        assert rt.id_from_name("scratch", "alice") == a
        assert rt.id_from_name("scratch", "bob") != a
        assert rt.id_from_name("tenant_quota", "alice") != a
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        assert rt.id_from_name("scratch", "alice") == a


@pytest.mark.anyio
async def test_new_unique_id_is_random_and_valid(tmp_path: Path) -> None:
    """RT-1: new_unique_id mints distinct ids that id_from_string accepts in their namespace only."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        router = rt.node.router
        ids = {rt.node.new_unique_id("scratch") for _ in range(50)}
        assert len(ids) == 50
        for oid in ids:
            assert HEX64.match(oid)
            assert router.id_from_string("scratch", oid) == oid
            with pytest.raises(MailboxActorsError) as e:
                router.id_from_string("tenant_quota", oid)
            assert e.value.code == "invalid_request"


def bad_ids(rt: TestRuntime) -> dict[str, str]:
    good = rt.id_from_name("tenant_quota", "t1")
    foreign = rt.id_from_name("identity_mailbox", "t1")
    return {
        "foreign namespace": foreign,
        "random hex": "0123456789abcdef" * 4,
        "uppercase": good.upper(),
        "too short": good[:-1],
        "too long": good + "0",
        "empty": "",
        "dot-dot": "../" + good[3:],
        "dot-dot path": "../../etc/passwd",
        "slash": good[:32] + "/" + good[33:],
        "nul": good[:63] + "\x00",
        "nul inside": good[:10] + "\x00" + good[11:],
        "space": " " + good[1:],
        "non-ascii": "é" + good[1:],
    }


@pytest.mark.anyio
async def test_malformed_ids_are_invalid_request_and_create_no_file(tmp_path: Path) -> None:
    """RT-1, RPC-6: a foreign, random, uppercase, wrong-length, '../' or NUL id is refused with
    invalid_request, for init and for other ops, and no file is created anywhere."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        before = files_under(tmp_path)
        for why, oid in bad_ids(rt).items():
            for req in (QuotaInit(per_minute=1, per_day=1), QuotaStatus()):
                with pytest.raises(MailboxActorsError) as e:
                    await rt.call("tenant_quota", oid, req, tenant_id="t1")
                assert e.value.code == "invalid_request", why
                assert "object id" in e.value.message, why
                with pytest.raises(MailboxActorsError):
                    rt.node.router.id_from_string("tenant_quota", oid)
        assert files_under(tmp_path) == before
        assert rt.node.host.active_count == 0


@pytest.mark.anyio
async def test_malformed_ids_over_call_bytes_are_invalid_request(tmp_path: Path) -> None:
    """RPC-6: the byte-level router answers a bad id with an invalid_request error body."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        before = files_under(tmp_path)
        body = msgspec.json.encode({"v": 1, "tenant_id": "t1", "request_id": "req_1",
                                    "deadline_ms": rt.now_ms() + 1000,
                                    "req": {"op": "init", "per_minute": 1, "per_day": 1}})
        for why, oid in bad_ids(rt).items():
            reply = msgspec.json.decode(await rt.call_bytes("tenant_quota", oid, body))
            assert reply["err"]["code"] == "invalid_request", why
        assert files_under(tmp_path) == before


@pytest.mark.anyio
async def test_unknown_namespace_is_invalid_request(tmp_path: Path) -> None:
    """RPC-6: a namespace the node does not serve is refused with invalid_request, no file made."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        before = files_under(tmp_path)
        oid = rt.id_from_name("scratch", "x")
        for ns in ("nope", "../scratch", "", "Scratch", "scratch\x00"):
            with pytest.raises(MailboxActorsError) as e:
                await rt.call(ns, oid, afs.Init(), tenant_id=afs.TENANT)
            assert e.value.code == "invalid_request", ns
            with pytest.raises(MailboxActorsError) as e2:
                rt.id_from_name(ns, "x")
            assert e2.value.code == "invalid_request"
        assert files_under(tmp_path) == before


@pytest.mark.anyio
async def test_each_actor_has_its_own_file_under_the_data_dir(tmp_path: Path) -> None:
    """RT-1, RT-2: a valid id maps to one SQLite file of its own inside the node's data directory."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        a = await afs.new_scratch(rt, "a")
        b = await afs.new_scratch(rt, "b")
        pa, pb = rt.node.host.path_for("scratch", a), rt.node.host.path_for("scratch", b)
        assert pa != pb
        for p, oid in ((pa, a), (pb, b)):
            assert inside(p, tmp_path)
            assert oid in p.name
