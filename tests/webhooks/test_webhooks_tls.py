"""Webhooks to https endpoints (Q-4): a real TLS listener on loopback with a certificate from a test
CA. Delivered when the node trusts the CA and the name matches; otherwise never sent, retried and
finally dead-lettered like any endpoint that cannot be reached."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import test_webhooks
import trustme
from test_webhooks import SECRET, T0, Receiver, World

from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.config import load_config
from mailbox_actors.platform.clock import FakeClock
from mailbox_actors.runtime.settings import SettingsError
from mailbox_actors.webhooks.delivery import SIGNATURE_HEADER, tls_context, verify

clock = test_webhooks.clock  # the same fixtures as the plain-http webhook tests
world = test_webhooks.world
# A TLS handshake takes real time (tens of ms on a loaded machine, more): these tests are about
# its outcome, so an attempt's timeout is far beyond it (a timeout is tested in test_webhooks.py).
HANDSHAKE_S = 30.0


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(tmp_path: Path, ca: trustme.CA) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@contextlib.asynccontextmanager
async def serving_tls(app: Any, ca: trustme.CA, name: str) -> AsyncIterator[int]:
    """``app`` over HTTPS on 127.0.0.1 with a certificate for ``name`` signed by ``ca``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(context)
    server = RpcHttpServer(app)
    port = await server.start("127.0.0.1", 0, ssl=context)
    try:
        yield port
    finally:
        await server.stop(grace_s=0.5)


async def https_tenant(world: World, port: int) -> str:
    tenant = await world.db.create_tenant("secure", webhook_url=f"https://127.0.0.1:{port}/hooks",
                                          webhook_secret=SECRET)
    return tenant.id


@pytest.mark.anyio
async def test_https_endpoint_with_a_trusted_certificate_gets_the_event(
        world: World, clock: FakeClock, ca: trustme.CA, ca_file: str) -> None:
    """Q-4: an https endpoint whose certificate the node trusts (ca_file) receives the event,
    signed, once."""
    receiver = Receiver(clock)
    async with serving_tls(receiver, ca, "127.0.0.1") as port:
        tenant = await https_tenant(world, port)
        world.attach(world.deliverer(ca_file=ca_file, attempt_timeout_s=HANDSHAKE_S))
        [event] = await world.emit(tenant, 1)
        await clock.run_until_idle()
    [hit] = receiver.hits
    assert hit.path == "/hooks" and event.id.encode() in hit.body
    assert verify(SECRET, hit.headers[SIGNATURE_HEADER], hit.body, now_s=T0 // 1000)
    assert world.metrics.get("webhooks_delivered_total") == 1
    assert await world.queues.depth("webhooks") == 0


@pytest.mark.anyio
@pytest.mark.parametrize("trusted", [False, True], ids=["unknown-ca", "wrong-name"])
async def test_a_certificate_not_accepted_is_never_sent_to_and_ends_dead_lettered(
        world: World, clock: FakeClock, ca: trustme.CA, ca_file: str, trusted: bool) -> None:
    """Q-4: a certificate from a CA the node does not trust, or for another name, fails the
    handshake: the event body never leaves the node; the attempt is retried on the schedule and the
    message ends in the dead letters, nothing lost."""
    receiver = Receiver(clock)
    async with serving_tls(receiver, ca, "127.0.0.1" if not trusted else "other.example") as port:
        tenant = await https_tenant(world, port)
        world.attach(world.deliverer(ca_file=ca_file if trusted else None,
                                     schedule_s=(1.0, 2.0), attempt_timeout_s=HANDSHAKE_S))
        await world.emit(tenant, 1)
        await clock.run_until_idle()
        assert world.metrics.get("webhooks_retried_total") == 1
        await clock.advance(3_000)
    assert receiver.hits == []
    [letter] = await world.queues.dead_letters("webhooks")
    assert letter["reason"] == ("tls certificate not accepted (not trusted, or not for this host) "
                                "after 3 attempts")
    assert world.metrics.get("webhooks_failed_total") == 1


def test_a_bad_webhook_ca_file_is_refused_at_start(tmp_path: Path, ca_file: str) -> None:
    """A CA file that is missing or not PEM is a settings error naming the setting, not a
    delivery failure later."""
    assert load_config({"webhook_ca_file": ca_file}, env={}).webhook_ca_file == ca_file
    for bad in (tmp_path / "missing.pem", tmp_path / "not.pem"):
        if bad.name == "not.pem":
            bad.write_text("not a certificate")
        with pytest.raises(SettingsError, match="webhook_ca_file"):
            load_config({"webhook_ca_file": str(bad)}, env={})
        with pytest.raises(ValueError, match="cannot be loaded"):
            tls_context(str(bad))


@pytest.mark.anyio
async def test_an_https_url_to_a_plain_http_endpoint_is_not_called_a_certificate_problem(
        world: World, clock: FakeClock) -> None:
    """Q-4: an https:// URL whose endpoint speaks plain HTTP fails the handshake; the dead letter
    says so, and does not send the operator to look at certificates."""
    receiver = Receiver(clock)
    server = RpcHttpServer(receiver)
    port = await server.start("127.0.0.1", 0)  # plain HTTP
    try:
        tenant = await https_tenant(world, port)
        world.attach(world.deliverer(schedule_s=(), attempt_timeout_s=HANDSHAKE_S))
        await world.emit(tenant, 1)
        await clock.run_until_idle()
    finally:
        await server.stop(grace_s=0.5)
    [letter] = await world.queues.dead_letters("webhooks")
    assert letter["reason"] == "tls handshake failed after 1 attempt"
    assert receiver.hits == []
