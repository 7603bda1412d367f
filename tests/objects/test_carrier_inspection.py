"""Operator inspection of delivery records (CA-10) and Carrier's commands (``send``,
``deliveries``): a read-only paged scan that opens no owner, creates nothing and arms nothing,
served over HTTP behind the operator token only."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from _carrier import NS, OPERATOR, TOKEN, call, email, get, mailbox, receipt, run_cli, serving
from mailbox_actors.http.client import HttpPool
from mailbox_actors.node import Node
from mailbox_actors.node.control_ops import create_identity
from mailbox_actors.objects.roster import JOINED
from mailbox_actors.platform.mail.recording import RecordingTransport
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.platform.services import Services
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.testing import TestRuntime
from mailbox_actors.wire.errors import MailboxActorsError
from mailbox_actors.wire.roster import MemberJoined, RosterAddress
from mailbox_actors.wire.transport import ProviderRejected

pytestmark = pytest.mark.anyio


def file_digest(path: Path) -> str:
    """The database and its log. Not the -shm: SQLite's shared-memory index of the log, where
    any reader of a file with a log marks what it reads (it holds no stored state); nor an empty
    log, which a reader of a file whose log was checkpointed away at close leaves (it holds
    nothing: the file reads the same with or without it)."""
    h = hashlib.sha256()
    for p in sorted(path.parent.glob(path.name + "*")):  # the file and its -wal
        if not p.name.endswith("-shm") and (not p.name.endswith("-wal") or p.stat().st_size):
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


async def test_pages_of_32_by_default_64_at_most_until_the_cursor_is_null() -> None:
    """CA-10: each page reads at most 64 rows (32 by default), so holds at most that many
    records, continued with after = next_cursor until it is null; every Email is seen once, in
    order; records carry state, attempts, retry time and provider evidence, never addresses,
    bodies or headers."""
    transport = RecordingTransport([ProviderRejected(code="451 4.3.0", klass="temporary")])
    async with TestRuntime(services={MAIL_TRANSPORT: transport}) as rt:
        mid = await mailbox(rt)
        for i in range(70):
            await call(rt, mid, email(f"s-{i:02d}", subject="Private subject",
                                      headers={"X-Secret": "hdr"}))
        await rt.run_until_idle()
        first = msgspec.to_builtins(rt.node.inspect_deliveries(mid))
        assert first["status"] == "available" and 1 <= len(first["records"]) <= 32
        assert first["next_cursor"] == first["records"][-1]["email_id"]
        seen = [r["email_id"] for r in first["records"]]
        after = first["next_cursor"]
        while after is not None:
            page = msgspec.to_builtins(rt.node.inspect_deliveries(mid, after=after, limit=64))
            assert len(page["records"]) <= 64
            seen += [r["email_id"] for r in page["records"] if r["kind"] == "email"]
            after = page["next_cursor"]
        ids = [(await receipt(rt, mid, f"s-{i:02d}"))["email_id"] for i in range(70)]
        assert seen == sorted(ids) and len(set(seen)) == 70
        retried = next(r for r in first["records"] if r["attempts"] == 1)
        assert retried["status"] == "queued" and retried["next_attempt_at_ms"] > rt.now_ms()
        assert retried["provider_rejection"] == {"code": "451 4.3.0", "class": "temporary"}
        sent = next(r for r in first["records"] if r["status"] == "provider_accepted")
        assert sent["provider_message_id"] and sent["attempts"] == 0 and sent["messages"] == 1
        text = json.dumps(first)
        for leak in ("@", "Private", "Secret", "hdr", "bob", "Hi Bob"):
            assert leak not in text
        for bad in ({"limit": 65}, {"limit": 0}, {"after": "x" * 201}):
            with pytest.raises(MailboxActorsError) as e:
                rt.node.inspect_deliveries(mid, **bad)  # type: ignore[arg-type]
            assert e.value.code == "invalid_request"


async def test_inspection_opens_no_owner_creates_nothing_arms_nothing(tmp_path: Path) -> None:
    """CA-10: reading a sleeping actor's records does not activate it, change its file or its
    alarm; a store without the delivery table is uninitialized (and stays without it); an id
    with no file is uninitialized too (regression: it was identity_not_found) and leaves no file
    behind."""
    async with TestRuntime(tmp_path, idle_ms=1000) as rt:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        await rt.advance(2000)  # evicted: no transport, the alarm waits five minutes
        assert not rt.node.host.is_active(NS, mid)
        path = rt.node.host.path_for(NS, mid)
        before = file_digest(path)
        alarm = rt.node.scheduler.pending((NS, mid)) if rt.node.scheduler else None  # type: ignore[attr-defined]
        page = msgspec.to_builtins(rt.node.inspect_deliveries(mid))
        assert [r["status"] for r in page["records"] if r["kind"] == "email"] == ["queued"]
        assert not rt.node.host.is_active(NS, mid)
        assert file_digest(path) == before
        assert (rt.node.scheduler.pending((NS, mid)) if rt.node.scheduler  # type: ignore[attr-defined]
                else None) == alarm

        bare = rt.id_from_name(NS, "made-by-an-older-version")
        bare_path = rt.node.host.path_for(NS, bare)
        bare_path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(bare_path) as conn:
            conn.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT)")
        assert msgspec.to_builtins(rt.node.inspect_deliveries(bare)) == {
            "status": "uninitialized"}
        with sqlite3.connect(bare_path) as conn:
            assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [
                ("meta",), ("sqlite_autoindex_meta_1",)]

        nobody = rt.id_from_name(NS, "never-created")
        assert msgspec.to_builtins(rt.node.inspect_deliveries(nobody)) == {
            "status": "uninitialized"}
        assert not rt.node.host.path_for(NS, nobody).exists()


async def test_over_http_only_the_operator_token_may_inspect() -> None:
    """CA-10, REL-3: GET /admin/deliveries/{id} answers the page with the operator token; the
    cluster token is 403 permission_denied, none or a wrong one 401; a bad limit 400, a mailbox
    with no file uninitialized, another method 405."""
    async with TestRuntime() as rt, serving(rt) as url:
        mid = await mailbox(rt)
        await call(rt, mid, email())
        status, page = await get(url, f"/admin/deliveries/{mid}?limit=5", OPERATOR)
        assert status == 200 and page["status"] == "available"
        assert [r["kind"] for r in page["records"]] == ["email", "post"]  # and its roster news
        status, err = await get(url, f"/admin/deliveries/{mid}", TOKEN)
        assert status == 403 and err["err"]["code"] == "permission_denied"
        for token in (None, "wrong-token-0123456789"):
            status, err = await get(url, f"/admin/deliveries/{mid}", token)
            assert status == 401 and err["err"]["code"] == "unauthenticated"
        status, err = await get(url, f"/admin/deliveries/{mid}?limit=abc", OPERATOR)
        assert status == 400 and err["err"]["details"]["field"] == "limit"
        status, err = await get(url, f"/admin/deliveries/{mid}?limit=65", OPERATOR)
        assert status == 400
        other = rt.id_from_name(NS, "nobody")
        status, page = await get(url, f"/admin/deliveries/{other}", OPERATOR)
        assert (status, page) == (200, {"status": "uninitialized"})
        status, err = await get(url, "/admin/deliveries/not-an-id", OPERATOR)
        assert status == 400
        async with HttpPool() as pool:
            status, _ = await pool.request(url, "POST", f"/admin/deliveries/{mid}",
                                           {"authorization": f"Bearer {OPERATOR}"}, b"",
                                           timeout_s=5)
        assert status == 405


async def test_send_and_deliveries_commands(tmp_path: Path) -> None:
    """CA-10, CA-14: ``mailbox-actors send`` names the tenant and identity by name, prints the
    queued receipt and with --wait follows it to provider_accepted; ``deliveries IDENTITY``
    prints pages with the operator token (--all follows next_cursor); bad input exits 1 with the
    error. (A node on the system clock: the command waits in real time.)"""
    (tmp_path / "cluster.token").write_text(TOKEN)
    (tmp_path / "operator.token").write_text(OPERATOR)
    transport = RecordingTransport()
    settings = RuntimeSettings(data_dir=str(tmp_path), control_db=str(tmp_path / "control.sqlite"),
                               queues_db=str(tmp_path / "queues.sqlite"))
    async with Node(settings, services=Services({MAIL_TRANSPORT: transport})) as node, \
            serving(node) as url:
        db = node.control_db
        assert db is not None
        tenant = await db.create_tenant("acme")
        identity = await create_identity(db, node, tenant.id, "support")
        status, lines = await run_cli(
            "send", "--tenant", "acme", "--identity", "support", "--from",
            "support@acme.example", "--to", "bob@example.com", "--subject", "Hi", "--text",
            "Hello", "--source-id", "cli-1", "--wait", "--data", str(tmp_path), "--url", url)
        assert status == 0
        assert lines[0]["status"] == "queued" and lines[-1]["status"] == "provider_accepted"
        assert transport.sent[0].subject == "Hi"
        for i in range(3):
            await node.call(NS, identity.mailbox_id, email(f"more-{i}"),
                            tenant_id=identity.tenant_id, identity_id=identity.id)
        status, pages = await run_cli("deliveries", identity.id, "--limit", "2", "--all",
                                      "--data", str(tmp_path), "--url", url)
        # Two rows a page: an Email (its Message, its row) fills one, its next Email's first
        # Message read on the way; the fourth page also holds the roster's Post job, and the
        # last, empty, finds nothing after it (a page may be short and still continue).
        assert status == 0 and [len(p["records"]) for p in pages] == [1, 1, 1, 2, 0]
        assert pages[-1]["next_cursor"] is None
        # PO-7: the identity's roster news to its tenant, by its producer key; no address.
        news = pages[-2]["records"][-1]
        assert (news["kind"], news["key"]) == ("post", f"roster:{identity.id}:joined")
        assert set(news) <= {"kind", "key", "state", "attempts", "retry_at_ms", "reason"}
        status, lines = await run_cli(
            "send", "--tenant", tenant.id, "--identity", identity.id, "--from", "not an address",
            "--to", "bob@example.com", "--text", "x", "--data", str(tmp_path), "--url", url)
        assert status == 1 and lines[0]["err"]["code"] == "invalid_request"
        assert lines[0]["err"]["details"]["field"] == "from"


async def test_post_jobs_are_in_the_same_scan_with_key_state_and_reason_only() -> None:
    """PO-7, CA-10: the operator scan pages an identity's Post jobs beside its Emails in one key
    order (``kind`` email or post), the cursor continuing across both: a Post record carries the
    producer's key (no internal prefix), state, attempts, retry time and dead-letter reason, never
    the address or the event; a delivered Post row keeps only its key and state; an Email and a
    Post job sharing a key are both seen, at every page size."""
    async with TestRuntime() as rt:
        mid = await mailbox(rt)  # its roster news is a Post job; no tenant here: a dead letter
        for i in range(3):
            await call(rt, mid, email(f"s-{i}", subject="Private subject"))
        await rt.run_until_idle()
        ids = sorted([(await receipt(rt, mid, f"s-{i}"))["email_id"] for i in range(3)])

        def same_key(actor: Any, _storage: Any) -> None:  # a producer key equal to an email id
            actor.sql.transaction_sync(lambda tx: actor.post.send(
                tx, JOINED, RosterAddress("acme"), MemberJoined("idn_other", mid), ids[1]))
        await rt.run_in_actor(NS, mid, same_key)
        await rt.run_until_idle()
        whole = msgspec.to_builtins(rt.node.inspect_deliveries(mid, limit=64))
        assert whole["next_cursor"] is None
        kinds = [(r["kind"], r.get("email_id") or r["key"]) for r in whole["records"]]
        posts = [r for r in whole["records"] if r["kind"] == "post"]
        assert sorted(k for k, _ in kinds) == ["email"] * 3 + ["post"] * 2
        assert [k for _, k in kinds] == sorted(k for _, k in kinds)  # one key order
        assert ("email", ids[1]) in kinds and ("post", ids[1]) in kinds
        joined = next(r for r in posts if r["key"].startswith("roster:"))
        assert joined["key"] == "roster:idn_support:joined"  # the producer's key as it gave it
        assert (joined["state"], joined["reason"], joined["attempts"]) == (
            "dead", "tenant_not_found", 1)
        text = json.dumps(whole)
        for leak in ("@", "Private", "acme", "idn_other", "tenant_id", "mailbox_id"):
            assert leak not in text
        for limit in (1, 2, 3, 4):  # every page size sees every record once, in the same order
            seen, after = [], None
            while True:
                page = msgspec.to_builtins(rt.node.inspect_deliveries(mid, after=after,
                                                                      limit=limit))
                assert len(page["records"]) <= max(limit, 2)
                seen += page["records"]
                after = page["next_cursor"]
                if after is None:
                    break
                assert page["records"]  # only a scan's last page may be empty (its rows spent)
                assert after == (seen[-1].get("email_id") or seen[-1]["key"])
            assert seen == whole["records"], limit
