"""The tenant roster on Post (PO-2..PO-5): each IdentityMailbox tells its tenant's TenantQuota
that it joined (init) and left (erase), in order and exactly once; in process with a FakeClock,
and across a SIGKILL of the quota's node in a real two-node cluster."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from cluster_proc import Cluster
from mailbox_actors.node.control_ops import UNLIMITED, create_identity
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.mailbox import MailboxErase, MailboxInit, MailboxStatus
from mailbox_actors.wire.post import PostDeadLetters, PostRetry
from mailbox_actors.wire.quota import QuotaInit, QuotaStatus
from mailbox_actors.wire.roster import QuotaRoster

pytestmark = pytest.mark.anyio


async def test_init_and_erase_reach_the_tenants_quota_once_each(tmp_path: Path) -> None:
    """PO-2, PO-4: a mailbox's init and erase each send one roster event in their own
    transaction; the quota applies each once (a second alarm run sends nothing again)."""
    async with TestRuntime(tmp_path) as rt:
        q = rt.id_from_name("tenant_quota", "t1")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=10, per_day=100), tenant_id="t1")
        boxes = [rt.node.new_unique_id("identity_mailbox") for _ in range(3)]
        for i, m in enumerate(boxes):
            await rt.call("identity_mailbox", m, MailboxInit(), tenant_id="t1", identity_id=f"i{i}")
        await rt.call("identity_mailbox", boxes[0], MailboxErase(), tenant_id="t1",
                      identity_id="i0")
        await rt.run_until_idle()
        for m in boxes:
            await rt.fire_alarm_now("identity_mailbox", m)
        roster = await rt.call("tenant_quota", q, QuotaRoster(), tenant_id="t1")
        assert roster == {"active": 2, "joined": 3, "left": 1}


async def test_a_quota_not_initialised_leaves_a_dead_letter_that_retry_delivers(
        tmp_path: Path) -> None:
    """PO-5, PO-6: a quota that does not exist answers tenant_not_found, a definite refusal: the
    roster event is a dead letter with that reason after one attempt, listed by the mailbox's
    post_dead_letters op; once the quota exists, the post_retry op delivers it."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.node.new_unique_id("identity_mailbox")
        owner = {"tenant_id": "t2", "identity_id": "i1"}
        await rt.call("identity_mailbox", m, MailboxInit(), **owner)
        await rt.run_until_idle()
        page = await rt.call("identity_mailbox", m, PostDeadLetters(), **owner)
        assert [(d["key"], d["reason"], d["attempts"]) for d in page["letters"]] == [
            ("roster:i1:joined", "tenant_not_found", 1)]
        assert page["next_cursor"] is None
        q = rt.id_from_name("tenant_quota", "t2")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=10, per_day=100), tenant_id="t2")
        again = await rt.call("identity_mailbox", m, PostRetry(key="roster:i1:joined"), **owner)
        assert again == {"action": "requeue"}
        await rt.run_until_idle()
        assert (await rt.call("identity_mailbox", m, PostDeadLetters(), **owner))["letters"] == []
        assert await rt.call("tenant_quota", q, QuotaRoster(), tenant_id="t2") == {
            "active": 1, "joined": 1, "left": 0}


@pytest.mark.slow
@pytest.mark.timeout(420)
async def test_roster_order_and_exactly_once_across_a_sigkill_of_the_quotas_node(
        tmp_path: Path) -> None:
    """PO-3, PO-4, PO-5 with real processes: mailboxes on both nodes of a cluster join and
    half of them leave while the node holding their tenant's TenantQuota is SIGKILLed and
    restarted by the supervisor; afterwards every join and leave was applied exactly once and
    in order (no erased identity is active, none counted twice)."""
    c = Cluster(tmp_path / "cluster", 2)
    try:
        c.wait_running()
        async with Client.from_data_dir(c.data, max_attempts=3) as client:
            tenant = "roster-tenant"

            async def until_ok(ns: str, oid: str, req: object, ident: str | None = None,
                               settled: tuple[str, ...] = ()) -> None:
                """Call until answered: a node may be down or restarting (bounded: a loaded
                machine restarts slowly). ``settled`` codes mean an earlier try took effect."""
                give_up = anyio.current_time() + 150
                while anyio.current_time() < give_up:
                    try:
                        await client.call(ns, oid, req, tenant_id=tenant, identity_id=ident)
                        return
                    except RpcError as e:
                        if e.code.value in settled:
                            return
                        assert e.code.value in ("unavailable", "timeout"), e
                        await anyio.sleep(0.05)  # pace calls at a node that is down
                seen = []
                while not c.lines.empty():
                    seen.append(c.lines.get())
                raise AssertionError(f"{ns} never answered; the supervisor said:\n"
                                     + "\n".join((c.log + seen)[-40:]))

            q = await client.id_from_name("tenant_quota", tenant)
            await until_ok("tenant_quota", q, QuotaInit(per_minute=10, per_day=100))
            victim = next(n for n in c.nodes() if n["url"] == client.owner_url("tenant_quota", q))
            boxes = [await client.new_unique_id("identity_mailbox") for _ in range(24)]
            assert {client.owner_url("identity_mailbox", b) for b in boxes} == {
                n["url"] for n in c.nodes()}, "the test needs mailboxes on both nodes"

            for i, m in enumerate(boxes):
                if i == 8:
                    os.kill(victim["pid"], signal.SIGKILL)
                await until_ok("identity_mailbox", m, MailboxInit(), f"i{i}")
            for i, m in enumerate(boxes[:12]):  # an erase whose answer was lost: not_found after
                await until_ok("identity_mailbox", m, MailboxErase(), f"i{i}",
                               settled=("identity_not_found",))
            await anyio.to_thread.run_sync(c.wait_for, f"{victim['name']} back")

            roster = {}
            give_up = anyio.current_time() + 150
            while anyio.current_time() < give_up:  # bounded: Post's retries back off by seconds
                try:
                    roster = await client.call("tenant_quota", q, QuotaRoster(), tenant_id=tenant)
                except RpcError:
                    roster = {}
                if roster.get("joined") == 24 and roster.get("left") == 12:
                    break
                await anyio.sleep(0.1)
            assert roster == {"active": 12, "joined": 24, "left": 12}
    finally:
        c.stop()


async def test_creating_an_identity_initialises_its_tenants_quota_so_the_roster_arrives(
        tmp_path: Path) -> None:
    """PO-5: creating an identity through the control database initialises its tenant's
    TenantQuota first when it was never initialised (with the largest limits: none in effect),
    so the roster's joined letter is delivered, not a tenant_not_found dead letter; a quota
    with limits already keeps them (init with keep_existing leaves them as they are)."""
    async with TestRuntime(tmp_path, control=True) as rt:
        db = rt.node.control_db
        assert db is not None
        fresh, limited = await db.create_tenant("fresh"), await db.create_tenant("limited")
        q_limited = rt.id_from_name("tenant_quota", limited.id)
        await rt.call("tenant_quota", q_limited, QuotaInit(per_minute=7, per_day=70),
                      tenant_id=limited.id)
        made = [await create_identity(db, rt.node, t.id, "support") for t in (fresh, limited)]
        await rt.run_until_idle()
        for tenant, ident in zip((fresh, limited), made, strict=True):
            owner = {"tenant_id": tenant.id, "identity_id": ident.id}
            dead = await rt.call("identity_mailbox", ident.mailbox_id, PostDeadLetters(), **owner)
            assert dead["letters"] == []
            q = rt.id_from_name("tenant_quota", tenant.id)
            assert await rt.call("tenant_quota", q, QuotaRoster(), tenant_id=tenant.id) == {
                "active": 1, "joined": 1, "left": 0}
        status = await rt.call("tenant_quota", rt.id_from_name("tenant_quota", fresh.id),
                               QuotaStatus(), tenant_id=fresh.id)
        assert (status["per_minute"], status["per_day"]) == (UNLIMITED, UNLIMITED)
        status = await rt.call("tenant_quota", q_limited, QuotaStatus(), tenant_id=limited.id)
        assert (status["per_minute"], status["per_day"]) == (7, 70)


async def test_an_erased_mailboxs_dead_roster_letters_are_listed_and_retried(
        tmp_path: Path) -> None:
    """PO-6, PO-7 (regression): a mailbox initialised before its tenant's quota existed has a
    dead joined letter; erased, a dead left one. Once the quota exists its Post records still
    answer (post_dead_letters lists both, post_retry puts each back: not identity_not_found,
    while its content ops are), and whatever order they are retried in, the quota's roster ends
    with the identity joined and left, not a member."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.node.new_unique_id("identity_mailbox")
        owner = {"tenant_id": "t3", "identity_id": "i1"}
        await rt.call("identity_mailbox", m, MailboxInit(), **owner)
        await rt.run_until_idle()
        await rt.call("identity_mailbox", m, MailboxErase(), **owner)
        await rt.run_until_idle()
        with pytest.raises(MailboxActorsError) as erased:
            await rt.call("identity_mailbox", m, MailboxStatus(), **owner)
        assert erased.value.code.value == "identity_not_found"
        page = await rt.call("identity_mailbox", m, PostDeadLetters(), **owner)
        assert sorted((d["key"], d["reason"]) for d in page["letters"]) == [
            ("roster:i1:joined", "tenant_not_found"), ("roster:i1:left", "tenant_not_found")]
        q = rt.id_from_name("tenant_quota", "t3")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=10, per_day=100), tenant_id="t3")
        for key in ("roster:i1:left", "roster:i1:joined"):  # the worse order: left first
            again = await rt.call("identity_mailbox", m, PostRetry(key=key), **owner)
            assert again == {"action": "requeue"}
        await rt.run_until_idle()
        assert (await rt.call("identity_mailbox", m, PostDeadLetters(), **owner))["letters"] == []
        assert await rt.call("tenant_quota", q, QuotaRoster(), tenant_id="t3") == {
            "active": 0, "joined": 1, "left": 1}
        with pytest.raises(MailboxActorsError) as foreign:
            await rt.call("identity_mailbox", m, PostDeadLetters(), tenant_id="t3",
                          identity_id="someone-else")
        assert foreign.value.code.value == "internal_error"  # an owner mismatch, as for any op


async def test_erasing_a_mailbox_does_not_strand_its_staged_letters(tmp_path: Path) -> None:
    """PO-3, PO-5: a joined letter put back in line and not yet delivered when the mailbox is
    erased is still delivered, and the left letter behind it after it: the roster ends right."""
    async with TestRuntime(tmp_path) as rt:
        m = rt.node.new_unique_id("identity_mailbox")
        owner = {"tenant_id": "t4", "identity_id": "i1"}
        await rt.call("identity_mailbox", m, MailboxInit(), **owner)
        await rt.run_until_idle()  # dead: no quota yet
        q = rt.id_from_name("tenant_quota", "t4")
        await rt.call("tenant_quota", q, QuotaInit(per_minute=10, per_day=100), tenant_id="t4")
        await rt.call("identity_mailbox", m, PostRetry(key="roster:i1:joined"), **owner)
        await rt.call("identity_mailbox", m, MailboxErase(), **owner)  # before any alarm ran
        await rt.run_until_idle()
        assert await rt.call("tenant_quota", q, QuotaRoster(), tenant_id="t4") == {
            "active": 0, "joined": 1, "left": 1}
        assert (await rt.call("identity_mailbox", m, PostDeadLetters(), **owner))["letters"] == []
