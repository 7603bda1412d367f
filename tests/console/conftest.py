"""A real cluster with its SMTP doors, a loopback DNS server, the console in dev mode and one
without, and a headless Chromium signed in to the dev one: built once for the folder's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from browser import Browser
from cluster_proc import Cluster
from console_stack import DOMAIN, ConsoleProc, Stack, cli, shots_dirs, text_of
from mailbox_actors.testing.dns import LoopbackDns
from mailbox_actors.testing.ports import free_port_block


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = tmp_path_factory.mktemp("console-cluster")
    smtp = free_port_block(2)
    dns = LoopbackDns().start()
    dns.add(DOMAIN, "MX", "10 mx1.provider.example")
    dns.add(DOMAIN, "TXT", "v=spf1 include:_spf.provider.example ~all")
    dns.add("_spf.provider.example", "TXT", "v=spf1 ip4:192.0.2.0/24 -all")
    dns.add(f"_dmarc.{DOMAIN}", "TXT", "v=DMARC1; p=none")
    # Dev mode (UI-6): each node's capture transport hands submitted mail to its own door, which
    # takes unknown recipients of the tenant's domain into its catch-all identity.
    cluster = Cluster(data, 2, extra=(
        "--smtp-listen-port", str(smtp), "--dev", "--transport", "capture",
        "--dns-nameservers", "127.0.0.1",
        "--dns-port", str(dns.nameserver[1])))
    consoles: list[ConsoleProc] = []
    try:
        cluster.wait_running()
        tenant = cli(data, "tenant", "create", "acme")
        support = cli(data, "identity", "create", "--tenant", "acme", "--name", "support",
                      "--address", f"support@{DOMAIN}")
        sales = cli(data, "identity", "create", "--tenant", "acme", "--name", "sales",
                    "--address", f"sales@{DOMAIN}")
        domain = cli(data, "domain", "add", DOMAIN, "--tenant", "acme", "--spf-include",
                     "_spf.provider.example", "--mx", "mx1.provider.example")
        consoles.append(ConsoleProc(data, "--dev", "--refresh-ms", "500"))
        consoles.append(ConsoleProc(data, "--refresh-ms", "500"))
        token = (data / "operator.token").read_text().strip()
        yield Stack(data, cluster, smtp, consoles[0], consoles[1], token, tenant, support, sales,
                    domain if isinstance(domain, dict) else {})
    finally:
        for c in consoles:
            c.stop()
        cluster.stop()
        dns.stop()


@pytest.fixture(scope="package")
def browser(stack: Stack) -> Iterator[Browser]:
    """Chromium signed in to the dev console."""
    with Browser() as b:
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        report = b.get(stack.dev.url + "/")  # sent to sign in
        assert report.clean, report
        b.screenshot("login", *shots_dirs())
        b.driver.find_element(By.ID, "token").send_keys(stack.operator_token)
        b.driver.find_element(By.ID, "sign-in").click()
        # The click returns when the form is sent, not when the 303 to "/" has been followed: a
        # loaded machine still shows /login for a moment. Wait for the redirect; a refused token
        # stays on /login and says so on the page.
        home = stack.dev.url + "/"
        try:
            WebDriverWait(b.driver, 30, poll_frequency=0.1).until(lambda d: d.current_url == home)
        except TimeoutException:
            raise AssertionError(f"sign-in did not reach {home}: still at {b.driver.current_url}, "
                                 f"page says {text_of(b.driver, 'main')!r}") from None
        yield b

