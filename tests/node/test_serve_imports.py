"""What ``serve`` imports before its first answer (PERF, section 12: ``serve`` to first answer
within 1.5x of the runtime libraries' import floor; issue 28 item 3), read from ``sys.modules`` in
the serving process itself once ``/healthz`` answered (its speed is the benchmark's
``serve_start_to_first_answer_ms``, not a timing here): no object's code, no mail stack, no
OpenAPI builder, no TOML parser, no HTTP client, nothing for logging to a terminal (structlog and
what its console renderer brings: rich, pygments, colorama); an object's code arrives with its
namespace's first request, and only that object's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

# The platform's objects and what only they use; what a start without peers, a config file, a mail
# transport or an /openapi.json request never needs.
NOT_AT_START = ("mailbox_actors.objects.identity_mailbox", "mailbox_actors.objects.domain_monitor",
                "mailbox_actors.objects.tenant_quota", "mailbox_actors.objects.notifier",
                "mailbox_actors.objects.delivery_inspection", "mailbox_actors.carrier",
                "mailbox_actors.post", "mailbox_actors.core.inbound.parse",
                "mailbox_actors.core.dns.checks", "email", "mailbox_actors.rpc.openapi",
                "tomllib", "mailbox_actors.node.inspection", "mailbox_actors.node.smtp_door",
                "aiosmtpd", "mailbox_actors.platform.mail", "mailbox_actors.wire.transport")
# Logging to a terminal: serve off one (its output a pipe here) writes JSON lines itself. rich is
# installed in the development environment (import-linter brings it), as in many users' own, and
# structlog's __init__ imports its console renderer, which imports rich, pygments and colorama.
NOT_AT_START_OFF_A_TERMINAL = ("structlog", "rich", "pygments", "colorama")
# The actor side: the router, the host, the actor base and actor storage (the node makes them once
# it answered, or at its first call).
ACTOR_SIDE = ("mailbox_actors.rpc.router", "mailbox_actors.runtime.host",
              "mailbox_actors.runtime.actor", "mailbox_actors.platform.storage.sql",
              "mailbox_actors.platform.storage.opening", "mailbox_actors.alarms.scheduler")

# Runs serve in this process; a thread reads its output, asks /healthz once it listens (the node
# notes the modules loaded as it gives that first answer: what it puts off begins right after),
# makes one TenantQuota call, reads them again and stops it.
_PROGRAM = """
import gc, io, json, os, signal, sys, threading, urllib.request
base = set(sys.modules)  # this program's own (urllib brings email): not serve's
from mailbox_actors.cli import main
from mailbox_actors.node.node import Node

at_answer = []
_answered = Node.answered

def answered(self):
    at_answer.append(sorted(set(sys.modules) - base))
    _answered(self)

Node.answered = answered

listening = threading.Event()
url = []

class Watch(io.TextIOBase):
    def write(self, s):
        if "listening on " in s and not url:
            url.append(s.split("listening on ")[1].split()[0])
            listening.set()
        return sys.__stdout__.write(s)
    def flush(self):
        sys.__stdout__.flush()

def after_start():
    try:
        ask()
    finally:  # a failure here fails the test at once: serve stops
        os.kill(os.getpid(), signal.SIGTERM)

def ask():
    listening.wait()
    urllib.request.urlopen(url[0] + "/healthz", timeout=60).read()
    first = at_answer[0]
    collecting = gc.isenabled()
    token = open(os.path.join(sys.argv[1], "cluster.token")).read().strip()
    req = urllib.request.Request(url[0] + "/ids/tenant_quota/by-name/q",
                                 headers={"authorization": "Bearer " + token})
    oid = json.loads(urllib.request.urlopen(req, timeout=60).read())["id"]
    body = json.dumps({"v": 1, "tenant_id": "t", "request_id": "req_x",
                       "deadline_ms": 4102444800000, "req": {"op": "usage"}}).encode()
    req = urllib.request.Request(url[0] + "/rpc/tenant_quota/" + oid, data=body, method="POST",
                                 headers={"authorization": "Bearer " + token})
    urllib.request.urlopen(req, timeout=60).read()
    after_call = sorted(set(sys.modules) - base)
    # A file of its own: the node's log lines share stderr and could land inside one line.
    with open(sys.argv[2], "w") as out:
        json.dump({"first": first, "after_call": after_call, "collecting": collecting}, out)

sys.stdout = Watch()
threading.Thread(target=after_start, daemon=True).start()
sys.exit(main(["serve", "--data", sys.argv[1], "--port", "0"]))
"""


def _loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_serve_answers_before_importing_any_object(tmp_path: Path) -> None:
    """PERF (issue 28): when ``serve`` first answers, none of NOT_AT_START nor of the actor side
    is loaded; after one TenantQuota call, the actor side and TenantQuota's module are, and the
    other objects' code still is not."""
    result = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", _PROGRAM, str(tmp_path / "data"), str(result)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(result.read_text())
    assert _loaded(seen["first"], NOT_AT_START) == []
    assert _loaded(seen["first"], NOT_AT_START_OFF_A_TERMINAL) == []
    assert _loaded(seen["first"], ACTOR_SIDE) == []
    assert _loaded(seen["after_call"], ACTOR_SIDE) == sorted(ACTOR_SIDE)
    assert seen["collecting"]  # the collector, off while it started, is on once it serves
    assert "mailbox_actors.objects.tenant_quota" in seen["after_call"]
    others = ("mailbox_actors.objects.identity_mailbox", "mailbox_actors.objects.domain_monitor",
              "mailbox_actors.objects.notifier", "mailbox_actors.carrier")
    assert _loaded(seen["after_call"], others) == []
    assert _loaded(seen["after_call"], NOT_AT_START_OFF_A_TERMINAL) == []


def test_this_environment_has_the_terminal_libraries_serve_must_not_import() -> None:
    """The test above means something only where rich (and what structlog's console renderer
    imports with it) is installed: this environment has them."""
    assert [m for m in ("structlog", "rich", "pygments") if importlib.util.find_spec(m) is None] == []


