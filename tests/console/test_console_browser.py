"""The web console in a real browser against a real cluster (UI-4, UI-5): every page renders with
no console error and no failed request, mail sent through the SMTP door appears in the inbox view
within one refresh, a hostile HTML mail runs no script and loads nothing, and each page is saved
as a screenshot."""

from __future__ import annotations

import http.server
import re
import smtplib
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from typing import ClassVar

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from browser import Browser
from console_stack import DOMAIN, Stack, cli, click, shots_dirs, text_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def send(stack: Stack, to: str, subject: str, *, text: str = "hello", html: str | None = None,
         sender: str = "someone@elsewhere.example") -> None:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = sender, to, subject
    msg.set_content(text)
    if html is not None:
        msg.add_alternative(html, subtype="html")
    with smtplib.SMTP("127.0.0.1", stack.smtp_port, timeout=30) as s:
        refused = s.send_message(msg)
    assert refused == {}


def link_to(b: Browser, pattern: str, text: str | None = None) -> str:
    """The href of the first link on the page whose href matches ``pattern`` (and whose text is
    ``text``, when given), read in one script."""
    links = b.driver.execute_script(
        "return Array.from(document.querySelectorAll('a')).map(a => [a.href, a.innerText])")
    for href, shown in links:
        if re.search(pattern, href) and (text is None or shown.strip() == text):
            return str(href)
    raise AssertionError(f"no link matching {pattern!r} on {b.driver.current_url}")


def assert_clean(b: Browser, url: str, name: str) -> None:
    report = b.get(url)
    assert report.clean, f"{name}: console {report.console}, failed {report.failed}"
    assert "mailbox-actors console" in b.driver.title
    assert b.driver.find_elements(By.CSS_SELECTOR, "h1.error") == [], f"{name} shows an error"
    b.screenshot(name, *shots_dirs())


def test_every_page_renders_clean_and_is_saved(stack: Stack, browser: Browser) -> None:
    """UI-5: each of the console's pages loads with no console error and no failed request, and a
    screenshot of it is written (overview, actors by kind, a namespace, one actor, a table's rows,
    identity, message, thread, domains, domain)."""
    send(stack, f"support@{DOMAIN}", "Welcome to the console",
         html="<h2>Hello</h2><p>This message arrived through the cluster's SMTP door.</p>")
    base = stack.dev.url
    assert_clean(browser, base + "/", "overview")
    assert_clean(browser, base + "/actors", "actors")
    assert_clean(browser, base + "/actors/identity_mailbox", "namespace")
    assert_clean(browser, link_to(browser, r"/actors/identity_mailbox/[0-9a-f]{64}$"), "actor")
    assert "Alarm" in text_of(browser.driver, "main")
    assert_clean(browser, link_to(browser, r"/rows/"), "rows")
    identity = f"{base}/identities/{stack.support['id']}"
    assert_clean(browser, identity, "identity")
    assert_clean(browser, link_to(browser, r"/messages/imsg_"), "message")
    assert_clean(browser, link_to(browser, r"/threads/thr_"), "thread")
    assert_clean(browser, base + "/domains", "domains")
    assert_clean(browser, link_to(browser, r"/domains/dom_"), "domain")
    checks = len(browser.driver.find_elements(By.CSS_SELECTOR, "#last-checks tbody tr.check"))
    click(browser.driver, "#check-now")  # DM-5, through the page's form
    WebDriverWait(browser.driver, 30, poll_frequency=0.2).until(
        lambda d: int(d.execute_script(
            "return document.querySelectorAll('#last-checks tbody tr.check').length")) > checks)
    report = browser.report(browser.driver.current_url)
    assert report.clean, report


def test_without_dev_mode_the_pages_show_no_content(stack: Stack, browser: Browser) -> None:
    """CA-10, UI-4: the console started without --dev (same operator, same session) renders the
    identity and a message with ids, states, counts and sizes only: no subject, address or body
    (no frame at all), with no console error."""
    send(stack, f"support@{DOMAIN}", "Never shown without dev mode", text="a private body")
    base = stack.private.url
    assert_clean(browser, f"{base}/identities/{stack.support['id']}", "identity-private")
    page = text_of(browser.driver, "main")
    assert "Never shown without dev mode" not in page and f"support@{DOMAIN}" not in page
    assert_clean(browser, link_to(browser, r"/messages/imsg_"), "message-private")
    page = text_of(browser.driver, "main")
    assert "Content is shown only in dev mode" in page and "a private body" not in page
    assert browser.driver.find_elements(By.TAG_NAME, "iframe") == []


def test_dev_inbox_captures_sent_mail_and_catches_unknown_recipients(stack: Stack,
                                                                    browser: Browser) -> None:
    """UI-6: in dev mode an Email submitted by one identity leaves through the capture transport
    to the node's own SMTP door: it arrives in the recipient identity, its Cc to an address no
    identity holds lands in the tenant's catch-all identity, and the console shows the sender's
    delivery record, both arrivals and the catch-all among the actors."""
    out = cli(stack.data, "send", "--tenant", "acme", "--identity", "sales",
              "--from", f"sales@{DOMAIN}", "--to", f"support@{DOMAIN}",
              "--cc", f"nobody-has-this@{DOMAIN}", "--subject", "Captured in dev mode",
              "--text", "sent by sales, caught by the door", "--wait")
    assert "provider_accepted" in str(out), out
    base = stack.dev.url
    assert_clean(browser, base + "/actors", "actors")
    catch_all = link_to(browser, r"/identities/idn_[0-9A-Z]+$", text="catch-all")
    # provider_accepted is the door's 250, answered once both ingests committed.
    assert_clean(browser, catch_all, "identity-catch-all")
    assert "Captured in dev mode" in text_of(browser.driver, "#inbox")
    def search(d: WebDriver) -> bool:  # IN-10: the mailbox's full-text search, from the page
        box = d.find_element(By.CSS_SELECTOR, "form.search input[name=q]")
        box.clear()
        box.send_keys("caught")
        box.submit()
        return True

    WebDriverWait(browser.driver, 10, ignored_exceptions=(StaleElementReferenceException,)
                  ).until(search)
    WebDriverWait(browser.driver, 30).until(lambda d: "matching" in text_of(d, "#inbound"))
    assert "Captured in dev mode" in text_of(browser.driver, "#inbox")
    report = browser.report(browser.driver.current_url)
    assert report.clean, report
    assert_clean(browser, link_to(browser, r"/messages/imsg_"), "message-catch-all")
    assert f"nobody-has-this@{DOMAIN}" in text_of(browser.driver, "main")
    assert_clean(browser, f"{base}/identities/{stack.support['id']}", "identity")
    assert "Captured in dev mode" in text_of(browser.driver, "#inbox")
    assert_clean(browser, f"{base}/identities/{stack.sales['id']}#outbound", "identity-outbound")
    outbound = text_of(browser.driver, "#outbound-records")
    assert "provider_accepted" in outbound or "delivered" in outbound


def test_mail_appears_in_the_inbox_within_one_refresh(stack: Stack, browser: Browser) -> None:
    """UI-5: with the identity's page open, a mail sent through the SMTP door appears in its inbox
    when the page refreshes itself on the event index's move, with no reload of the page."""
    browser.get(f"{stack.dev.url}/identities/{stack.sales['id']}")
    browser.driver.execute_script("window.notReloaded = true")
    assert "Arrives within one refresh" not in text_of(browser.driver, "#inbox")
    send(stack, f"sales@{DOMAIN}", "Arrives within one refresh")
    WebDriverWait(browser.driver, 30, poll_frequency=0.1).until(
        lambda d: "Arrives within one refresh" in text_of(d, "#inbox"))
    assert browser.driver.execute_script("return window.notReloaded") is True  # swapped in place
    report = browser.report(browser.driver.current_url)
    assert report.clean, report


class _Trap(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Trap.hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def trap() -> Iterator[int]:
    """A loopback HTTP server that records every request a hostile mail tries to make."""
    _Trap.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trap)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_hostile_html_mail_runs_no_script_and_loads_nothing(stack: Stack, browser: Browser,
                                                            trap: int) -> None:
    """UI-4: a mail whose HTML carries scripts, event handlers, a meta refresh, remote images,
    style sheets, frames and a form is shown in the sandboxed frame with none of it run or
    loaded: the trap server sees no request and the page's title and storage are untouched."""
    t = f"http://127.0.0.1:{trap}"
    hostile = (
        f"<p id=marker>hostile body</p>"
        f"<script>top.document.title='pwned';fetch('{t}/script');"
        f"document.getElementById('marker').textContent='script ran'</script>"
        f"<img src=x onerror=\"fetch('{t}/onerror')\">"
        f"<img src='{t}/remote-image.png'>"
        f"<link rel=stylesheet href='{t}/style.css'>"
        f"<meta http-equiv=refresh content='0;url={t}/meta-refresh'>"
        f"<iframe src='{t}/frame'></iframe>"
        f"<svg onload=\"fetch('{t}/svg')\"></svg>"
        f"<form action='{t}/form' method=post><button id=go>go</button></form>"
        f"<div style=\"background:url('{t}/css-bg')\">styled</div>")
    send(stack, f"support@{DOMAIN}", "Hostile HTML", html=hostile)
    browser.get(f"{stack.dev.url}/identities/{stack.support['id']}")
    message = link_to(browser, r"/messages/imsg_")  # newest first: the hostile one
    report = browser.get(message)
    frame = browser.driver.find_element(By.CSS_SELECTOR, "iframe.mail")
    assert frame.get_attribute("sandbox") == ""
    browser.driver.switch_to.frame(frame)
    try:
        WebDriverWait(browser.driver, 30, poll_frequency=0.1).until(
            lambda d: d.find_elements(By.ID, "marker"))
        assert browser.driver.find_element(By.ID, "marker").text == "hostile body"
        browser.driver.find_element(By.ID, "go").click()  # a form in the sandbox cannot submit
    finally:
        browser.driver.switch_to.default_content()
    after = browser.report(message)
    assert "pwned" not in browser.driver.title
    assert _Trap.hits == [], f"the hostile mail reached {_Trap.hits}"
    assert report.console == [] and after.console == [], (report.console, after.console)
    assert report.failed == [] and after.failed == [], (report.failed, after.failed)
    browser.screenshot("message-hostile", *shots_dirs())
