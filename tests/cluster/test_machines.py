"""CL-6, CL-8, CL-10, CL-12, CL-13: three machine processes on one real PostgreSQL. Requests for
any id reach its slot's holder from any machine in at most one hop; clients learn the slot map
from ``GET /cluster``; a dead machine's slots answer ``unavailable`` under ``local`` and come back
with it (a new epoch, nothing acknowledged lost), and are taken by the others after the TTL under
``shared``; a drain hands slots over; bad settings exit 2 naming the setting."""

from __future__ import annotations

import json
import smtplib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from _pg import PgServer
from machines_proc import SECRET, TOKEN, MachineProc, env, holders, slots_cmd, wait_for
from mailbox_actors.cluster.slots import slot_of
from mailbox_actors.core.actor_ids import id_from_name, namespace_key
from mailbox_actors.node.forwarding import FORWARDED_HEADER
from mailbox_actors.platform.locks import lock_holder
from mailbox_actors.rpc import Client
from mailbox_actors.testing.ports import free_port
from mailbox_actors.wire.quota import QuotaStatus

pytestmark = pytest.mark.slow

SLOTS = 6


def _rpc(url: str, namespace: str, oid: str, req: dict[str, Any], tenant: str,
         headers: dict[str, str] | None = None) -> dict[str, Any]:
    body = json.dumps({"v": 1, "tenant_id": tenant, "request_id": "req_x", "req": req,
                       "deadline_ms": int(time.time() * 1000) + 20_000}).encode()
    r = urllib.request.Request(f"{url}/rpc/{namespace}/{oid}", data=body, method="POST",
                               headers={"authorization": f"Bearer {TOKEN}",
                                        "content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(r, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def _qid(tenant: str) -> str:
    return id_from_name(namespace_key("tenant_quota", SECRET.encode()), tenant)


def _start(dsn: str, tmp: Path, policy: str, names: list[str]) -> list[MachineProc]:
    made = slots_cmd(dsn, "create", "--slots", str(SLOTS), "--machines", ",".join(names),
                     "--slot-failover", policy)
    assert made.returncode == 0, made.stderr
    shared = tmp / "shared"
    shared.mkdir()
    ms = [MachineProc(dsn, n, shared / "volumes" if policy == "shared" else tmp / n / "volumes",
                      shared) for n in names]
    for m in ms:
        m.wait_listening()
    return ms


@pytest.fixture
def stop_all() -> Iterator[list[MachineProc]]:
    started: list[MachineProc] = []
    yield started
    for m in started:
        m.stop()


def _all_held(m: MachineProc) -> list[str | None] | None:
    h = holders(m)
    return h if all(h) else None


def test_cl6_cl12_three_machines_route_every_id_to_its_slot_holder(
        pg_dsn: str, tmp_path: Path, stop_all: list[MachineProc]) -> None:
    ms = _start(pg_dsn, tmp_path, "local", ["m1", "m2", "m3"])
    stop_all += ms
    for m in ms:  # each machine's map is its own last read (renewal period): wait for each
        wait_for(lambda m=m: _all_held(m), f"every slot held, as {m.name} sees it")
    doc = ms[1].get("/cluster")
    assert doc["slots"] == SLOTS and doc["slot_failover"] == "local"
    assert [r["holder"] for r in doc["map"]] == [f"m{k % 3 + 1}" for k in range(SLOTS)]
    assert set(doc["machines"]) == {"m1", "m2", "m3"} and "postgres" not in json.dumps(doc)
    assert {r["epoch"] for r in doc["map"]} == {1}
    tenants = [f"t{i}" for i in range(18)]
    for i, t in enumerate(tenants):  # through every machine: one hop to the holder
        out = _rpc(ms[i % 3].url, "tenant_quota", _qid(t),
                   {"op": "init", "per_minute": 100, "per_day": 1000}, t)
        assert "ok" in out, out
    for i, t in enumerate(tenants):
        out = _rpc(ms[(i + 1) % 3].url, "tenant_quota", _qid(t), {"op": "status"}, t)
        assert out["ok"]["per_minute"] == 100
    # Each slot's files are on its holder's volume only (under local, nothing else sees them).
    for t in tenants:
        slot = slot_of(SLOTS, "tenant_quota", _qid(t))
        holder = f"m{slot % 3 + 1}"
        for m in ms:
            has = (m.volumes / f"slot-{slot}").exists()
            assert has == (m.name == holder), (t, slot, m.name)
    # A request already forwarded once that lands on a non-holder (a stale map) is answered
    # unavailable naming slot and epoch: the non-holder never opens its own copy.
    t = tenants[0]
    slot = slot_of(SLOTS, "tenant_quota", _qid(t))
    other = next(m for m in ms if m.name != f"m{slot % 3 + 1}")
    out = _rpc(other.url, "tenant_quota", _qid(t), {"op": "status"}, t, {FORWARDED_HEADER: "1"})
    assert out["err"]["code"] == "unavailable" and out["err"]["retryable"]
    assert out["err"]["details"] == {"slot": slot, "epoch": 1}
    assert not (other.volumes / f"slot-{slot}").exists()
    # A Client learns the map from any machine and calls each holder directly.
    async def by_client() -> None:
        async with await Client.from_cluster(ms[2].url, TOKEN) as client:
            for t in tenants:
                oid = _qid(t)
                holder = f"m{slot_of(SLOTS, 'tenant_quota', oid) % 3 + 1}"
                assert client.owner_url("tenant_quota", oid) == next(
                    m.url for m in ms if m.name == holder)
                got = await client.call("tenant_quota", oid, QuotaStatus(), tenant_id=t)
                assert got["per_minute"] == 100

    anyio.run(by_client)
    # The command line too: given any machine's URL it routes by the map (never the database).
    t = tenants[1]
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", "call", "tenant_quota",
                          _qid(t), '{"op":"status"}', "--tenant", t, "--url", ms[2].url,
                          "--data", str(tmp_path / "nothing")], capture_output=True, text=True,
                         timeout=60, env=env())
    assert out.returncode == 0, out.stderr
    assert "100" in out.stdout, out.stdout
    # status from PostgreSQL: machines, slots, epochs, lease ages.
    shown = slots_cmd(pg_dsn, "status")
    assert shown.returncode == 0, shown.stderr
    assert "slot_failover local" in shown.stdout and "m3" in shown.stdout
    st = json.loads(slots_cmd(pg_dsn, "status", "--json").stdout)
    assert [r["holder"] for r in st["map"]] == [f"m{k % 3 + 1}" for k in range(SLOTS)]
    assert all(r["renewed_age_s"] is not None for r in st["map"])


def test_cl13_local_a_dead_machines_slots_wait_for_it_and_lose_nothing(
        pg_dsn: str, tmp_path: Path, stop_all: list[MachineProc]) -> None:
    ms = _start(pg_dsn, tmp_path, "local", ["m1", "m2"])
    stop_all += ms
    for m in ms:
        wait_for(lambda m=m: _all_held(m), f"every slot held ({m.name})")
    tenants = [f"t{i}" for i in range(12)]
    for t in tenants:
        assert "ok" in _rpc(ms[0].url, "tenant_quota", _qid(t),
                            {"op": "init", "per_minute": 7, "per_day": 70}, t)
    victim = ms[1]
    victim.kill()
    on_victim = [t for t in tenants if slot_of(SLOTS, "tenant_quota", _qid(t)) % 2 == 1]
    assert on_victim
    t = on_victim[0]
    # Until it returns (the TTL passes too: under local nobody else takes its slots).
    wait_for(lambda: holders(ms[0])[1] is None, "the dead machine's lease expired")
    out = _rpc(ms[0].url, "tenant_quota", _qid(t), {"op": "status"}, t)
    assert out["err"]["code"] == "unavailable" and out["err"]["retryable"]
    assert out["err"]["details"]["slot"] == slot_of(SLOTS, "tenant_quota", _qid(t))
    assert holders(ms[0])[1] is None and holders(ms[0])[0] == "m1"
    victim.start()
    victim.wait_listening()
    wait_for(lambda: _all_held(ms[0]), "the machine took its slots back")
    doc = ms[0].get("/cluster")
    assert {r["epoch"] for r in doc["map"] if r["holder"] == "m2"} == {2}  # a new epoch
    for t in tenants:
        out = _rpc(ms[0].url, "tenant_quota", _qid(t), {"op": "status"}, t)
        assert out["ok"]["per_minute"] == 7, (t, out)


def test_cl13_shared_another_machine_takes_a_dead_machines_slots_after_the_ttl(
        pg_dsn: str, tmp_path: Path, stop_all: list[MachineProc]) -> None:
    ms = _start(pg_dsn, tmp_path, "shared", ["m1", "m2", "m3"])
    stop_all += ms
    homes = [f"m{k % 3 + 1}" for k in range(SLOTS)]
    for m in ms:
        wait_for(lambda m=m: holders(m) == homes, f"every slot held by its home ({m.name})")
    tenants = [f"t{i}" for i in range(12)]
    for t in tenants:
        assert "ok" in _rpc(ms[0].url, "tenant_quota", _qid(t),
                            {"op": "init", "per_minute": 9, "per_day": 90}, t)
    stale_map = ms[0].get("/cluster")  # m2 in it
    ms[1].kill()
    for m in (ms[0], ms[2]):
        wait_for(lambda m=m: (h := holders(m)) and all(h) and "m2" not in h,
                 f"m2's slots taken by the others ({m.name})")

    async def through_stale_map() -> None:
        # A stale map costs one failed attempt: the client rereads GET /cluster and goes on.
        t = next(t for t in tenants if slot_of(SLOTS, "tenant_quota", _qid(t)) % 3 == 1)
        stale = Client([("m1", ms[0].url)], TOKEN)
        stale.apply_map(stale_map)
        assert stale.owner_url("tenant_quota", _qid(t)) == ms[1].url
        got = await stale.call("tenant_quota", _qid(t), QuotaStatus(), tenant_id=t,
                               idempotent=True)
        assert got["per_minute"] == 9
        assert stale.owner_url("tenant_quota", _qid(t)) != ms[1].url
        await stale.aclose()

    anyio.run(through_stale_map)
    doc = ms[2].get("/cluster")
    assert {r["epoch"] for r in doc["map"] if r["slot"] % 3 == 1} == {2}
    for t in tenants:  # nothing acknowledged lost; no file was copied: the same volume
        out = _rpc(ms[2].url, "tenant_quota", _qid(t), {"op": "status"}, t)
        assert out["ok"]["per_minute"] == 9, (t, out)
    # It comes back: its home slots are handed back to it (a new epoch again).
    ms[1].start()
    ms[1].wait_listening()
    for m in ms:
        wait_for(lambda m=m: holders(m) == homes, f"m2's slots handed back ({m.name})")
    assert {r["epoch"] for r in ms[0].get("/cluster")["map"] if r["slot"] % 3 == 1} == {3}
    # A drain hands a machine's slots over cleanly.
    drained = slots_cmd(pg_dsn, "drain", "--machine", "m3")
    assert drained.returncode == 0, drained.stderr
    for m in ms[:2]:
        wait_for(lambda m=m: (h := holders(m)) and all(h) and "m3" not in h,
                 f"m3 drained ({m.name})")
    for t in tenants:
        out = _rpc(ms[0].url, "tenant_quota", _qid(t), {"op": "status"}, t)
        assert out["ok"]["per_minute"] == 9, (t, out)


def test_cl8_a_machine_with_another_s_secret_or_dsn_exits_2_naming_the_setting(
        pg_dsn: str, tmp_path: Path, stop_all: list[MachineProc]) -> None:
    assert slots_cmd(pg_dsn, "create", "--slots", "4", "--machines", "m1").returncode == 0
    again = slots_cmd(pg_dsn, "create", "--slots", "8", "--machines", "m1")
    assert again.returncode == 2 and "setting 'slots' is 8" in again.stderr

    def refused(m: MachineProc) -> str:
        assert m.wait() == 2
        return "\n".join(m.log)

    shared = tmp_path / "s"
    shared.mkdir()
    # Started together: each is refused before it locks anything (the cluster's row, the
    # database's reach, the machine's registration come before the front node's volume lock).
    bad = {"setting 'slots' is 8 but the cluster was created with 4":
           MachineProc(pg_dsn, "m1", tmp_path / "v", shared, extra=("--slots", "8")),
           "setting 'id_secret' differs":
           MachineProc(pg_dsn, "m1", tmp_path / "v", shared,
                       extra_env={"MAILBOX_ACTORS_ID_SECRET": "another-secret-0123456789"}),
           "setting 'postgres': cannot reach PostgreSQL":
           MachineProc("host=127.0.0.1 port=1 user=x dbname=x connect_timeout=2", "m1",
                       tmp_path / "v", shared),
           "setting 'machine': 'm9' is not a machine of this cluster":
           MachineProc(pg_dsn, "m9", tmp_path / "v", shared)}
    for why, m in bad.items():
        assert why in refused(m), why
    assert not list((tmp_path / "v").rglob("*.sqlite")), "a refused machine opened a file"
    # Two processes of one machine on one volume directory: the second is refused, naming the
    # holder's pid.
    first = MachineProc(pg_dsn, "m1", tmp_path / "v", shared)
    stop_all.append(first)
    first.wait_listening()
    second = MachineProc(pg_dsn, "m1", tmp_path / "v", shared)
    text = refused(second)
    assert first.proc is not None and f"pid {first.proc.pid}" in text, text
    assert env()["MAILBOX_ACTORS_ID_SECRET"] == SECRET


def test_cl14_shared_the_new_holder_fires_the_slots_overdue_alarms(
        pg_dsn: str, tmp_path: Path, stop_all: list[MachineProc]) -> None:
    made = slots_cmd(pg_dsn, "create", "--slots", "2", "--machines", "m1,m2",
                     "--slot-failover", "shared")
    assert made.returncode == 0, made.stderr
    support = str(Path(__file__).parents[1] / "support")
    objects = ("--objects", "actors_for_tests:Scratch")
    ms = [MachineProc(pg_dsn, n, tmp_path / "volumes", tmp_path, extra=objects,
                      extra_env={"PYTHONPATH": support}) for n in ("m1", "m2")]
    stop_all += ms
    for m in ms:
        m.wait_listening()
        wait_for(lambda m=m: holders(m) == ["m1", "m2"], f"homes held ({m.name})")
    key = namespace_key("scratch", SECRET.encode())
    oid = next(i for n in range(50) if slot_of(2, "scratch", i := id_from_name(key, f"a{n}")) == 1)
    due = int(time.time() * 1000) + 1500
    assert "ok" in _rpc(ms[0].url, "scratch", oid, {"op": "init", "alarm_at": due}, "t_test")
    ms[1].kill()  # before its alarm is due: it never fired there
    wait_for(lambda: holders(ms[0]) == ["m1", "m1"], "m1 took slot 1")
    fired = wait_for(lambda: _rpc(ms[0].url, "scratch", oid, {"op": "fired"}, "t_test")["ok"],
                     "the overdue alarm fired on the new holder")
    assert len(fired) == 1 and fired[0][1] == due  # once, at its scheduled time's due


def test_cl10_cl17_a_lost_lease_releases_the_volume_and_an_outage_keeps_the_epoch(
        pg_server: PgServer, pg_dsn: str, tmp_path: Path, stop_all: list[MachineProc]) -> None:
    assert slots_cmd(pg_dsn, "create", "--slots", "2", "--machines", "m1").returncode == 0
    m1 = MachineProc(pg_dsn, "m1", tmp_path / "v", tmp_path)
    stop_all.append(m1)
    m1.wait_listening()
    wait_for(lambda: holders(m1) == ["m1", "m1"], "m1 holds both slots")
    tenant = next(f"t{i}" for i in range(100) if slot_of(2, "tenant_quota", _qid(f"t{i}")) == 0)
    assert "ok" in _rpc(m1.url, "tenant_quota", _qid(tenant),
                        {"op": "init", "per_minute": 5, "per_day": 50}, tenant)
    assert m1.proc is not None and lock_holder(m1.volumes / "slot-0") == m1.proc.pid
    # Another holder took slot 0 (a new epoch): m1's renewal, fenced on its epoch, finds it lost;
    # it drains the slot and releases the volume, and answers unavailable for it.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE ma_slot_leases SET holder = 'm2', epoch = epoch + 1, "
                     "expires_at = now() + interval '1 hour' WHERE slot = 0")
    wait_for(lambda: lock_holder(m1.volumes / "slot-0") is None, "slot 0's volume released")
    out = _rpc(m1.url, "tenant_quota", _qid(tenant), {"op": "status"}, tenant)
    assert out["err"]["code"] == "unavailable" and out["err"]["details"]["slot"] == 0
    # PostgreSQL stops: m1 serves slot 1 to its deadline, then answers unavailable naming slot
    # and epoch; nobody takes the slot; once it is back, the same epoch serves again.
    other = next(f"t{i}" for i in range(100) if slot_of(2, "tenant_quota", _qid(f"t{i}")) == 1)
    assert "ok" in _rpc(m1.url, "tenant_quota", _qid(other),
                        {"op": "init", "per_minute": 6, "per_day": 60}, other)
    pg_server.stop()
    try:
        def refused() -> dict[str, Any] | None:
            got = _rpc(m1.url, "tenant_quota", _qid(other), {"op": "status"}, other)
            return got["err"] if "err" in got else None

        err = wait_for(refused, "slot 1 unavailable after its deadline")
        assert err["code"] == "unavailable" and err["details"] == {"slot": 1, "epoch": 1}
    finally:
        pg_server.start()
    got = wait_for(lambda: _rpc(m1.url, "tenant_quota", _qid(other), {"op": "status"},
                                other).get("ok"), "slot 1 served again")
    assert got["per_minute"] == 6
    assert m1.get("/cluster")["map"][1]["epoch"] == 1  # renewed, not taken again


def _cli(dsn: str, data: Path, *args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", *args, "--data", str(data),
                          "--postgres", dsn], capture_output=True, text=True, timeout=60,
                         env=env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _send(port: int, rcpt: str, subject: str) -> None:
    raw = (f"From: Alice <alice@example.com>\r\nTo: {rcpt}\r\nSubject: {subject}\r\n"
           f"Message-ID: <{subject}@example.com>\r\n\r\nhello through a machine's door\r\n")
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as s:
        assert s.sendmail("alice@example.com", [rcpt], raw.encode()) == {}


def test_cl15_every_machine_runs_a_door_rcpt_in_postgres_data_to_the_slot_holder(
        pg_dsn: str, tmp_path: Path, stop_all: list[MachineProc]) -> None:
    assert slots_cmd(pg_dsn, "create", "--slots", "4", "--machines", "m1,m2").returncode == 0
    ports = [free_port(), free_port()]
    ms = [MachineProc(pg_dsn, n, tmp_path / n, tmp_path, extra=("--smtp-listen-port", str(p)))
          for n, p in zip(("m1", "m2"), ports, strict=True)]
    stop_all += ms
    for m in ms:
        m.wait_listening()
        wait_for(lambda m=m: _all_held(m), f"every slot held ({m.name})")
    data = tmp_path / "cli"
    data.mkdir()
    tenant = _cli(pg_dsn, data, "tenant", "create", "acme")
    bob = _cli(pg_dsn, data, "identity", "create", "--tenant", tenant["id"], "--name", "bob",
               "--address", "bob@example.com", "--url", ms[0].url)
    slot = slot_of(4, "identity_mailbox", bob["mailbox_id"])
    holder = ms[slot % 2]
    other = ports[1 - slot % 2]  # the door of the machine that does not hold the mailbox
    ids = {"tenant_id": tenant["id"], "identity_id": bob["id"]}

    async def received(subject: str, before: int) -> dict[str, Any]:
        async with await Client.from_cluster(ms[0].url, TOKEN) as client:
            got: dict[str, Any] = await client.wait_for_message(
                bob["mailbox_id"], **ids, timeout_ms=30_000, subject_contains=subject,
                received_after_ms=before - 1)
            return got

    before = int(time.time() * 1000)
    _send(other, "bob@example.com", "first")  # 250 only after the holder committed it
    assert anyio.run(received, "first", before)["status"] == "matched"
    # The holder is gone (local: nobody else takes its slots): RCPT still resolves in
    # PostgreSQL; DATA is answered 451, a retryable refusal.
    holder.kill()
    wait_for(lambda: holders(ms[1 - slot % 2])[slot] is None, "the holder's lease expired")
    with pytest.raises(smtplib.SMTPDataError) as e:
        _send(other, "bob@example.com", "second")
    assert e.value.smtp_code == 451
    with pytest.raises(smtplib.SMTPRecipientsRefused):  # an unknown address: 550, as on one
        _send(other, "nobody@example.com", "third")
