"""What the console's tests drive: the console as a child process, an HTTP session of it with its
own cookies, the command line, and the stack of a cluster and two consoles they share."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

from selenium.webdriver.remote.webdriver import WebDriver

from cluster_proc import Cluster

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "console"
DOCS_SHOTS = REPO / "docs" / "console"
DOMAIN = "acme.example"


def cli(data: Path, *args: str) -> Any:
    """``mailbox-actors ARGS --data DATA`` and its JSON output (its text when that is not one
    JSON document)."""
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", *args, "--data", str(data)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    try:
        return json.loads(out.stdout)
    except ValueError:
        return out.stdout


class ConsoleProc:
    """``mailbox-actors console`` as a child process, stopped by its pid."""

    def __init__(self, data: Path, *args: str) -> None:
        # Port 0: the console binds a free port itself and prints where it listens.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mailbox_actors", "console", "--data", str(data), "--port",
             "0", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        line = self.lines.get(timeout=60)
        found = re.match(r"console: listening on (http://127\.0\.0\.1:(\d+))/ ", line)
        assert found, line
        self.url, self.port = found.group(1), int(found.group(2))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Session:
    """An HTTP client of the console with its own cookie jar (not a browser: for the checks a
    browser would not let a page make, such as a POST without the CSRF token)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                  _NoRedirect())

    def request(self, method: str, path: str, form: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
        data = None if form is None else urllib.parse.urlencode(form).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers or {})
        try:
            with self.opener.open(req, timeout=30) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def sign_in(self, token: str) -> None:
        status, _, _ = self.request("POST", "/login", {"token": token})
        assert status == 303


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kw: Any) -> None:
        return None


@dataclass
class Stack:
    data: Path
    cluster: Cluster
    smtp_port: int
    dev: ConsoleProc
    private: ConsoleProc
    operator_token: str
    tenant: dict[str, Any]
    support: dict[str, Any]
    sales: dict[str, Any]
    domain: dict[str, Any]


def shots_dirs() -> tuple[Path, ...]:
    """Screenshots go to build/console (the test's artifacts) and, with
    MAILBOX_ACTORS_UPDATE_SCREENSHOTS=1, to docs/console as well."""
    dirs = [ARTIFACTS]
    if os.environ.get("MAILBOX_ACTORS_UPDATE_SCREENSHOTS") == "1":
        dirs.append(DOCS_SHOTS)
    return tuple(dirs)


def text_of(d: WebDriver, css: str) -> str:
    """The text of the first element ``css`` selects, read in one script (a page that refreshes
    itself replaces elements between a find and a read)."""
    return str(d.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css))


def click(d: WebDriver, css: str) -> None:
    """Click the element ``css`` selects, found again if the page replaced it meanwhile (a page
    refreshes itself when the event index moves)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def press(drv: WebDriver) -> bool:
        drv.find_element(By.CSS_SELECTOR, css).click()
        return True

    WebDriverWait(d, 10, poll_frequency=0.1,
                  ignored_exceptions=(StaleElementReferenceException,)).until(press)
