"""Headless Chromium for the console's tests (UI-5): Debian's ``chromium`` and ``chromium-driver``,
installed when missing (as root, with apt-get), driven through Selenium. ``Browser`` keeps what the
browser logged and every request that failed, page by page, so a test can say "no console error,
no failed request" of exactly the page it loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from debian_packages import apt_install

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--window-size=1400,1000",
         "--hide-scrollbars", "--lang=en-US")


def ensure_chromium() -> None:
    """Install Debian's Chromium and its driver when either is missing; fail (never skip) when
    that is impossible here."""
    apt_install(["chromium", "chromium-driver"],
                lambda: os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER),
                why="the console's browser tests")


@dataclass
class PageReport:
    """What one page load logged: console messages at warning or worse, and failed requests."""

    url: str
    console: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # refused by CSP or the sandbox, on purpose

    @property
    def clean(self) -> bool:
        return not self.console and not self.failed


class Browser:
    """``with Browser() as b: b.get(url)`` — one headless Chromium with a fresh profile."""

    def __init__(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        ensure_chromium()
        self._profile = tempfile.mkdtemp(prefix="console-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={self._profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        self.driver.set_page_load_timeout(30)
        self.driver.set_script_timeout(30)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self._profile, ignore_errors=True)

    def get(self, url: str) -> PageReport:
        """Load ``url`` and report what it logged (logs read since the previous report)."""
        self.drain()
        self.driver.get(url)
        return self.report(url)

    def drain(self) -> None:
        self.driver.get_log("browser")
        self.driver.get_log("performance")

    def report(self, url: str) -> PageReport:
        out = PageReport(url)
        for entry in self.driver.get_log("browser"):
            if entry["level"] in ("SEVERE", "WARNING"):
                text = str(entry["message"])
                (out.blocked if _on_purpose(text) else out.console).append(text)
        urls: dict[str, str] = {}
        for entry in self.driver.get_log("performance"):
            msg: dict[str, Any] = json.loads(entry["message"])["message"]
            params = msg.get("params", {})
            if msg["method"] == "Network.requestWillBeSent":
                urls[params["requestId"]] = params["request"]["url"]
            elif msg["method"] == "Network.responseReceived":
                status = params["response"]["status"]
                if status >= 400:
                    out.failed.append(f"{params['response']['url']} answered {status}")
            elif msg["method"] == "Network.loadingFailed":
                where = urls.get(params["requestId"], "?")
                text = f"{where}: {params.get('errorText')} {params.get('blockedReason') or ''}"
                if params.get("canceled"):
                    continue  # a request the browser dropped when the test navigated away
                if params.get("blockedReason") or where == "?":
                    # Refused by the page's own policy (CSP, sandbox), or a request of the
                    # browser's that no page made (before the logs began): not a page's failure.
                    out.blocked.append(text)
                else:
                    out.failed.append(text)
        return out

    def screenshot(self, name: str, *dirs: Path) -> None:
        """Save the whole page (as tall as its content) as ``name``.png in each of ``dirs``."""
        height = int(self.driver.execute_script(
            "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"))
        self.driver.set_window_size(1400, max(700, min(height + 40, 3000)))
        self.driver.execute_script("window.scrollTo(0, 0)")
        png = self.driver.get_screenshot_as_png()
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{name}.png").write_bytes(png)
        self.driver.set_window_size(1400, 1000)


def _on_purpose(text: str) -> bool:
    """Messages of a policy doing its job: a sandbox or CSP refusing what a hostile mail asked."""
    return ("Blocked script execution" in text or "Content Security Policy" in text
            or "violates the following" in text or "sandboxed" in text)
