"""Carrier as a library (CA-15): the guide's actor of a user's own sends durable email in a few
lines; a Carrier over an actor's storage keeps its wake armed while it has pending work."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest

from mailbox_actors.carrier import SCHEMA, Carrier, Submit
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT
from mailbox_actors.runtime.actor import Actor, ActorContext, Call
from mailbox_actors.runtime.migrations import Migration
from mailbox_actors.testing import RecordingTransport, TestRuntime
from mailbox_actors.wire.transport import ProviderRejected

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "sending-mail.md"


def _run_example(doc: Path, heading: str, tmp_path: Path) -> list[str]:
    """The first Python block under ``heading`` in ``doc``, run as a script: its printed words."""
    text = doc.read_text()
    section = text[text.index(heading):]
    start = section.index("```python\n") + len("```python\n")
    script = tmp_path / "invitations.py"
    script.write_text(section[start:section.index("\n```", start)])
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-800:]
    return proc.stdout.split()


def test_the_guide_actor_sends_durable_email(tmp_path: Path) -> None:
    """CA-15: the guide's "Carrier in your own actor" example runs as written: queued, then sent
    once from the actor's own wake."""
    assert _run_example(GUIDE, "## Carrier in your own actor", tmp_path) == [
        "queued", "You", "are", "invited"]


class _Init(msgspec.Struct, tag="init", tag_field="op"):
    pass


class _Send(msgspec.Struct, tag="send", tag_field="op"):
    source_id: str


class _Get(msgspec.Struct, tag="get", tag_field="op"):
    source_id: str


class _Pending(msgspec.Struct, tag="pending", tag_field="op"):
    pass


class Notices(Actor[_Init | _Send | _Get | _Pending]):
    """A user's actor with a Carrier woken by its own purpose name."""

    namespace = "notices"
    requests = _Init | _Send | _Get | _Pending
    init_request = _Init
    migrations = (Migration(1, SCHEMA),)
    alarm_purposes: ClassVar[Mapping[str, str]] = {"mail": "mail_tick"}

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.carrier = Carrier.for_actor(ctx, purpose="mail")

    async def mail_tick(self) -> None:
        await self.carrier.tick()

    async def handle(self, call: Call, req: _Init | _Send | _Get | _Pending) -> Any:
        match req:
            case _Init():
                return self.sql.transaction_sync(lambda tx: self.ctx.claim_owner(call))
            case _Send():
                return self.carrier.send(Submit(source_id=req.source_id, from_="a@acme.example",
                                                to=["b@example.com"], subject="s", text="t"))
            case _Get():
                return self.carrier.get(req.source_id)
            case _Pending():
                return {"pending": self.carrier.has_pending_work(),
                        "wake": self.ctx.scheduled().get("mail")}


@pytest.mark.anyio
async def test_the_wake_stays_armed_while_work_is_pending() -> None:
    """CA-15: a temporary rejection leaves the Email queued, has_pending_work true and the wake
    armed for the retry; the retry sends it, and with nothing pending the wake is gone."""
    transport = RecordingTransport([ProviderRejected(code="E_RATE_LIMIT_EXCEEDED",
                                                     klass="temporary")])
    async with TestRuntime(objects=(*DEFAULT_OBJECTS, Notices),
                           services={MAIL_TRANSPORT: transport}) as rt:
        oid = rt.id_from_name("notices", "acme")
        await rt.call("notices", oid, _Init(), tenant_id="acme")
        first = await rt.call("notices", oid, _Send("n-1"), tenant_id="acme")
        assert first["status"] == "queued"
        replay = await rt.call("notices", oid, _Send("n-1"), tenant_id="acme")
        assert replay == first
        await rt.run_until_idle()
        waiting = await rt.call("notices", oid, _Get("n-1"), tenant_id="acme")
        assert waiting["status"] == "queued" and waiting["attempts"] == 1
        state = await rt.call("notices", oid, _Pending(), tenant_id="acme")
        assert state == {"pending": True, "wake": waiting["next_attempt_at_ms"]}
        await rt.advance(waiting["next_attempt_at_ms"] - rt.now_ms())
        done = await rt.call("notices", oid, _Get("n-1"), tenant_id="acme")
        assert done["status"] == "provider_accepted" and transport.calls == 2
        assert await rt.call("notices", oid, _Pending(), tenant_id="acme") == {
            "pending": False, "wake": None}
        types = [e.type for e in rt.events.events("email.")]
        assert types[:3] == ["email.queued", "email.dispatching", "email.requeued"]


@pytest.mark.anyio
async def test_a_users_own_actors_deliveries_are_inspected_as_a_mailboxs(
        tmp_path: Path) -> None:
    """CA-10, CA-15: the Emails of a user's own actor built on Carrier are the operator's to
    inspect as an IdentityMailbox's are: ``Node.inspect_deliveries(id, namespace=...)``, ``GET
    /admin/deliveries/{namespace}/{id}`` behind the operator token, and ``mailbox-actors
    deliveries --namespace NS NAME`` (by the actor's name or its id), the same records every
    way, without an address; an unknown namespace or an id of another is invalid_request."""
    from _carrier import OPERATOR, TOKEN, get, run_cli, serving

    (tmp_path / "cluster.token").write_text(TOKEN)
    (tmp_path / "operator.token").write_text(OPERATOR)
    transport = RecordingTransport([ProviderRejected(code="E_RATE_LIMIT_EXCEEDED",
                                                     klass="temporary")])
    async with TestRuntime(tmp_path / "rt", objects=(*DEFAULT_OBJECTS, Notices),
                           services={MAIL_TRANSPORT: transport}) as rt, serving(rt) as url:
        oid = rt.id_from_name("notices", "acme")
        await rt.call("notices", oid, _Init(), tenant_id="acme")
        for n in ("n-1", "n-2"):
            await rt.call("notices", oid, _Send(n), tenant_id="acme")
        await rt.run_until_idle()
        page = msgspec.to_builtins(rt.node.inspect_deliveries(oid, namespace="notices"))
        assert page["status"] == "available" and page["next_cursor"] is None
        states = sorted((r["kind"], r["status"], r["attempts"]) for r in page["records"])
        assert states == [("email", "provider_accepted", 0), ("email", "queued", 1)]
        assert "@" not in str(page)
        status, over_http = await get(url, f"/admin/deliveries/notices/{oid}", OPERATOR)
        assert (status, over_http) == (200, page)
        status, err = await get(url, f"/admin/deliveries/notices/{oid}", TOKEN)
        assert status == 403 and err["err"]["code"] == "permission_denied"
        status, err = await get(url, f"/admin/deliveries/nowhere/{oid}", OPERATOR)
        assert status == 400 and err["err"]["code"] == "invalid_request"
        mailbox_id = rt.id_from_name("identity_mailbox", "acme")
        status, err = await get(url, f"/admin/deliveries/notices/{mailbox_id}", OPERATOR)
        assert status == 400 and err["err"]["code"] == "invalid_request"
        for who in ("acme", oid):
            code, pages = await run_cli("deliveries", "--namespace", "notices", who,
                                        "--data", str(tmp_path), "--url", url)
            assert (code, pages) == (0, [page])
        code, _ = await run_cli("deliveries", "--namespace", "nowhere", "acme",
                                "--data", str(tmp_path), "--url", url)
        assert code == 1


def test_the_readme_actor_sends_durable_email(tmp_path: Path) -> None:
    """CA-15: the README's "Durable email from your own actor" example runs as written: queued,
    then sent once from the actor's own wake."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    assert _run_example(readme, "## Durable email from your own actor", tmp_path) == [
        "queued", "You", "are", "invited"]
