"""The pytest plugin (TK-1, TK-4), installed with the package as a ``pytest11`` entry point.

Fixtures (async ones run under anyio's pytest plugin, like the tests that use them):

- ``actor_runtime``: a started ``TestRuntime`` for the test, in the test's ``tmp_path`` (isolated
  storage), stopped afterwards. Configure it with ``@pytest.mark.actor_runtime(objects=[...],
  raise_errors=True, **settings)`` or by overriding ``actor_runtime_options``.
- ``actor_runtime_factory``: ``await make(**options)`` starts another ``TestRuntime`` (several nodes
  in one test, or one reopened on the same directory); all are stopped afterwards.
- ``actor_cluster``: a real ``mailbox-actors cluster`` of node processes (``TestCluster``; kill and
  get back node by node); ``@pytest.mark.actor_cluster(nodes=3, settings={...})``.
- ``smtp_sink``: an aiosmtpd server on loopback that records what it is sent (``SmtpSink``).
- ``webhook_receiver``: a loopback endpoint that verifies webhook signatures with the secret
  ``WEBHOOK_SECRET`` (``WebhookReceiver``), on the test runtime's FakeClock when there is one.

Every test's runtime log lines go to pytest's log capture (logger ``mailbox_actors``), not to its
stdout or stderr. ``--actor-raise-errors`` (or the ini option ``actor_raise_errors = true``) makes
every fixture runtime re-raise a handler's exception in the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from mailbox_actors.platform.logging import reset_logging
from mailbox_actors.testing import TestCluster, TestRuntime, WebhookReceiver
from mailbox_actors.testing.logs import capture_runtime_logs
from mailbox_actors.testing.smtp import SmtpSink

__all__ = ["WEBHOOK_SECRET"]

WEBHOOK_SECRET = "whsec_mailbox_actors_test"
RuntimeFactory = Callable[..., Awaitable[TestRuntime]]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mailbox-actors")
    group.addoption("--actor-raise-errors", action="store_true", default=None,
                    help="re-raise an actor handler's exception in the test instead of the "
                         "internal_error its caller gets (TestRuntime(raise_errors=True))")
    parser.addini("actor_raise_errors", type="bool", default=False,
                  help="mailbox-actors: re-raise actor handler exceptions in tests")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "actor_runtime(**options): the TestRuntime options of the "
                                       "actor_runtime fixture (objects=, raise_errors=, settings)")
    config.addinivalue_line("markers", "actor_cluster(nodes=3, settings=None): the actor_cluster "
                                       "fixture's size and settings")


def _raise_errors(config: pytest.Config) -> bool:
    flag = config.getoption("--actor-raise-errors")
    return bool(flag) if flag is not None else bool(config.getini("actor_raise_errors"))


@pytest.fixture(autouse=True)
def _mailbox_actors_logs() -> Iterator[None]:
    """TK-4: the runtime's log lines become records of the ``mailbox_actors`` logger."""
    capture_runtime_logs()
    yield
    reset_logging()


@pytest.fixture
def actor_runtime_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The options ``actor_runtime`` is made with: the ``actor_runtime`` marker's keywords."""
    options: dict[str, Any] = {"raise_errors": _raise_errors(request.config)}
    marker = request.node.get_closest_marker("actor_runtime")
    if marker is not None:
        if marker.args:
            raise pytest.UsageError("@pytest.mark.actor_runtime takes keyword options only")
        options.update(marker.kwargs)
    return options


@pytest.fixture
async def actor_runtime(anyio_backend: Any, tmp_path: Path,
                        actor_runtime_options: dict[str, Any]) -> AsyncIterator[TestRuntime]:
    """A started TestRuntime for this test (its own directory, FakeClock, seeded Rng)."""
    options = dict(actor_runtime_options)
    data_dir = options.pop("data_dir", tmp_path / "actor-runtime")
    async with TestRuntime(data_dir, **options) as rt:
        yield rt


@pytest.fixture
async def actor_runtime_factory(anyio_backend: Any, tmp_path: Path,
                                request: pytest.FixtureRequest) -> AsyncIterator[RuntimeFactory]:
    """``rt = await actor_runtime_factory(**options)``: more started runtimes, stopped at the end.
    Each gets its own directory unless ``data_dir`` is given (reopen one: a restart)."""
    raise_errors = _raise_errors(request.config)
    count = 0
    async with AsyncExitStack() as stack:
        async def make(**options: Any) -> TestRuntime:
            nonlocal count
            count += 1
            options.setdefault("raise_errors", raise_errors)
            data_dir = options.pop("data_dir", tmp_path / f"actor-runtime-{count}")
            return await stack.enter_async_context(TestRuntime(data_dir, **options))

        yield make


@pytest.fixture
def actor_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TestCluster]:
    """A running local cluster of node processes (``TestCluster``), stopped (by pid) after."""
    marker = request.node.get_closest_marker("actor_cluster")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    with TestCluster(tmp_path / "actor-cluster", kwargs.pop("nodes", 3), **kwargs) as cluster:
        yield cluster


@pytest.fixture
async def smtp_sink(anyio_backend: Any) -> AsyncIterator[SmtpSink]:
    """An SMTP server on 127.0.0.1 that records every message (``SmtpSink``)."""
    sink = SmtpSink()
    await sink.start()
    try:
        yield sink
    finally:
        await sink.stop()


@pytest.fixture
async def webhook_receiver(anyio_backend: Any,
                           request: pytest.FixtureRequest) -> AsyncIterator[WebhookReceiver]:
    """A webhook endpoint on 127.0.0.1 verifying signatures with ``WEBHOOK_SECRET``; it reads the
    time from the test's ``actor_runtime`` when the test has one."""
    now_ms = None
    if "actor_runtime" in request.fixturenames:
        now_ms = request.getfixturevalue("actor_runtime").now_ms
    async with WebhookReceiver(WEBHOOK_SECRET, now_ms=now_ms) as receiver:
        yield receiver
