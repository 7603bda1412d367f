"""``queues`` and ``events`` from the command line against a real node (UI-3): a webhook dead letter
listed with its reason and redriven by id; ``events tail`` prints what is indexed and, following,
what is indexed while it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from child_output import Lines
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.queues import QueueService
from mailbox_actors.platform.rng import SystemRng
from serve_proc import serving


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                          text=True, timeout=120)


def _ok(*args: str) -> str:
    done = _cli(*args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    data = tmp_path_factory.mktemp("queues") / "node"
    with serving(data):
        _ok("tenant", "create", "acme", "--data", str(data))
        yield data


def test_a_dead_letter_is_listed_and_redriven_from_the_command_line(node: Path) -> None:
    """UI-3: a webhook message the consumer refuses (not an event) is given up on at once; the
    ``queues dead-letters`` table and JSON show it with its reason and attempts; ``queues redrive
    --id`` sends it back (as a new message) and takes its record away."""
    async def send() -> str:
        clock = SystemClock()
        async with QueueService(node / "queues.sqlite", clock=clock,
                                ids=Ids(clock, SystemRng())) as q:
            return await q.send("webhooks", {"v": 1, "kind": "webhook_event",
                                             "tenant_id": "ten_x"})
    sent = anyio.run(send)
    letters: list[Any] = []
    for _ in range(120):  # bounded: the node's recorder picks the letter up within a second
        letters = json.loads(_ok("queues", "dead-letters", "--data", str(node),
                                 "--json"))["dead_letters"]
        if letters:
            break
    [letter] = letters
    assert letter["message_id"] == sent and letter["reason"].startswith("invalid body")
    assert letter["attempts"] == 1 and letter["queue"] == "webhooks"
    table = _ok("queues", "dead-letters", "webhooks", "--data", str(node))
    assert table.split()[:6] == ["message", "kind", "attempts", "reason", "recorded", "event"]
    assert sent in table
    out = _ok("queues", "redrive", "--id", sent, "--data", str(node))
    assert out.startswith(f"{sent} -> qm_") and "redriven: 1 to webhooks" in out
    again = json.loads(_ok("queues", "redrive", "--id", sent, "--data", str(node), "--json"))
    assert again["redriven"] == []
    done = _cli("queues", "dead-letters", "bad name", "--data", str(node))
    assert done.returncode == 1 and "invalid_request" in done.stderr
    done = _cli("queues", "redrive", "--limit", "0", "--data", str(node))
    assert done.returncode == 2


def test_events_tail_prints_what_is_indexed_and_follows_it(node: Path) -> None:
    """UI-3: ``events tail --no-follow`` prints the tenant's events and ends; following, it prints
    an event indexed after it started (a new identity's), then ends at --count."""
    _ok("identity", "create", "--tenant", "acme", "--name", "bob", "--data", str(node))
    lines = [json.loads(x) for x in _ok("events", "tail", "--tenant", "acme", "--no-follow",
                                        "--json", "--data", str(node)).splitlines()]
    assert lines and all(set(e) >= {"event_id", "type", "namespace", "object_id"}
                         for e in lines)
    assert "identity.created" in {e["type"] for e in lines}
    text = _ok("events", "tail", "--tenant", "acme", "--no-follow", "--data", str(node))
    assert "identity.created" in text
    follower = subprocess.Popen(
        [sys.executable, "-m", "mailbox_actors", "events", "tail", "--tenant", "acme", "--json",
         "--poll-ms", "100", "--count", str(len(lines) + 1), "--data", str(node)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        out = Lines(follower)
        out.until(lines[-1]["event_id"])  # caught up with what was there
        _ok("identity", "create", "--tenant", "acme", "--name", "carol", "--data", str(node))
        new = json.loads(out.until("identity.created")[-1])
        assert new["event_id"] not in {e["event_id"] for e in lines}
        assert follower.wait(timeout=60) == 0  # --count reached
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
        if follower.stdout is not None:
            follower.stdout.close()
    done = _cli("events", "tail", "--tenant", "nobody", "--no-follow", "--data", str(node))
    assert done.returncode == 1 and "tenant_not_found" in done.stderr
