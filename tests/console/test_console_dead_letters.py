"""Queues in the console (UI-3, UI-4, UI-5): a webhook event given up on is listed with its reason
and attempts on the Queues page, and the Redrive button sends it back to its queue, from where it
is delivered to the endpoint that now answers."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import anyio
import pytest
from selenium.webdriver.support.ui import WebDriverWait

from browser import Browser
from console_stack import Stack, cli, click, shots_dirs, text_of
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.queues.service import QueueService
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.webhooks.publish import WEBHOOKS_QUEUE
from mailbox_actors.webhooks.signature import ATTEMPT_HEADER, EVENT_ID_HEADER

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


class _Hook(http.server.BaseHTTPRequestHandler):
    """A tenant's webhook endpoint: answers ``status`` and records (event id, attempt)."""

    status: ClassVar[int] = 500
    seen: ClassVar[list[tuple[str, str]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        _Hook.seen.append((self.headers.get(EVENT_ID_HEADER, ""),
                           self.headers.get(ATTEMPT_HEADER, "")))
        self.send_response(_Hook.status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    _Hook.status, _Hook.seen = 500, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


async def _late_in_its_schedule(queues_db: Path, tenant_id: str, event: dict[str, object],
                                object_id: str) -> str:
    """Put the tenant's real event on the webhooks queue as a message on its last retry (as
    the consumer re-enqueues one after its seventh failure): one more failure dead-letters it."""
    clock = SystemClock()
    async with QueueService(queues_db, clock=clock, ids=Ids(clock, SystemRng())) as q:
        return await q.send(WEBHOOKS_QUEUE, {
            "v": 1, "kind": "webhook_event", "tenant_id": tenant_id,
            "namespace": "identity_mailbox", "object_id": object_id, "event": event,
            "attempt": 7})


def test_a_dead_letter_is_redriven_from_the_queues_page(stack: Stack, browser: Browser,
                                                        hook: str, tmp_path: Path) -> None:
    """UI-3, UI-5: a webhook event whose endpoint keeps failing is dead-lettered and listed on
    the Queues page with its reason and attempts; Redrive on the page sends it back, and once the
    endpoint answers it is delivered (attempt 8), and the letter is gone from the page."""
    secret = tmp_path / "whsec"
    secret.write_text("s" * 32)
    tenant = cli(stack.data, "tenant", "create", "hooked", "--webhook-url", hook,
                 "--webhook-secret-file", str(secret))
    ident = cli(stack.data, "identity", "create", "--tenant", "hooked", "--name", "ops")
    events = cli(stack.data, "call", "identity_mailbox", ident["mailbox_id"],
                 json.dumps({"op": "get_events", "after_sequence": 0, "limit": 10}),
                 "--tenant", tenant["id"], "--identity", ident["id"])
    event = events["ok"]["events"][0] if "ok" in events else events["events"][0]
    letter = anyio.run(_late_in_its_schedule, stack.data / "queues.sqlite", tenant["id"], event,
                       ident["mailbox_id"])

    queues = stack.dev.url + "/queues"

    def listed(_: object) -> bool:
        browser.driver.get(queues)
        return letter in text_of(browser.driver, "main")

    WebDriverWait(browser.driver, 90, poll_frequency=0.5).until(listed)
    report = browser.get(queues)
    assert report.clean, report
    row = str(browser.driver.execute_script(
        "return Array.from(document.querySelectorAll('tr')).map(r => r.innerText)"
        ".find(t => t.includes(arguments[0])) || ''", letter))
    assert "http 500" in row and "8" in row  # reason and attempts
    browser.screenshot("queues", *shots_dirs())

    _Hook.status = 200
    click(browser.driver, f'tr:has(input[value="{letter}"]) button.redrive')
    WebDriverWait(browser.driver, 30).until(
        lambda d: "Redriven" in text_of(d, "main"))
    assert letter not in text_of(browser.driver, "table[id^=dead-letters]")
    report = browser.report(browser.driver.current_url)
    assert report.clean, report
    WebDriverWait(browser.driver, 60, poll_frequency=0.2).until(
        lambda d: (event["id"], "8") in _Hook.seen)


def test_a_post_dead_letter_is_retried_from_the_actor_page(stack: Stack, browser: Browser) -> None:
    """PO-6, UI-4: a mailbox whose tenant's quota was never initialised has its roster letter
    refused (tenant_not_found) and dead; its actor page lists it with the reason, and once the
    quota exists, Retry on the page delivers it and the dead letter is gone."""
    tenant = "ten_console_orphan"
    mailbox = cli(stack.data, "id", "identity_mailbox", "--name", "console-orphan")
    mailbox = mailbox["id"] if isinstance(mailbox, dict) else str(mailbox).strip()
    cli(stack.data, "call", "identity_mailbox", mailbox, '{"op":"init"}', "--tenant", tenant,
        "--identity", "idn_console_orphan")
    page = f"{stack.dev.url}/actors/identity_mailbox/{mailbox}"

    def dead(_: object) -> bool:
        browser.driver.get(page)
        return "tenant_not_found" in text_of(browser.driver, "#post-dead-letters")

    WebDriverWait(browser.driver, 60, poll_frequency=0.5).until(dead)
    report = browser.get(page)
    assert report.clean, report
    quota = cli(stack.data, "id", "tenant_quota", "--name", tenant)
    quota = quota["id"] if isinstance(quota, dict) else str(quota).strip()
    cli(stack.data, "call", "tenant_quota", quota,
        '{"op":"init","per_minute":1000,"per_day":100000}', "--tenant", tenant)
    click(browser.driver, "#post-dead-letters button.retry")

    def gone(_: object) -> bool:
        browser.driver.get(page)
        return "no dead letters" in text_of(browser.driver, "#post-dead-letters")

    WebDriverWait(browser.driver, 60, poll_frequency=0.5).until(gone)
    report = browser.report(page)
    assert report.clean, report
