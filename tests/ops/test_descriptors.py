"""Descriptors (OPS-4) against a real ``serve`` process started with a low RLIMIT_NOFILE: the node
raises its soft limit to the hard one, bounds its open actors by it, and under thousands of new
actors every connection gets an answer (ok, or a retryable ``overloaded``/``unavailable``), never a
reset."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from child_output import Lines, _port
from mailbox_actors.http.client import HttpPool
from mailbox_actors.rpc import Client, RpcError
from mailbox_actors.wire.quota import QuotaInit

pytestmark = pytest.mark.slow

SOFT, HARD = 128, 256
ACTORS = 800


def _low_limit() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))


def _limits(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line")


@pytest.mark.anyio
async def test_a_low_descriptor_limit_is_raised_and_bounds_actors_without_resets(
        tmp_path: Path) -> None:
    """OPS-4: started with soft 128 / hard 256 descriptors, the node runs with 256; it opens no
    more actors than that leaves room for; 800 new actors (15 times that) created over 16
    connections all get an HTTP answer, each ok or retryable, and each refused one is created
    when asked again; the node stays up, stops cleanly."""
    data, port = tmp_path / "node", _port()
    proc = subprocess.Popen(  # noqa: ASYNC220 - the node under test, stopped below by pid
        [sys.executable, "-m", "mailbox_actors", "serve", "--data", str(data), "--port",
         str(port), "--log-level", "error"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=_low_limit)
    try:
        await anyio.to_thread.run_sync(Lines(proc).until, "operator token")
        assert _limits(proc.pid) == (HARD, HARD)
        outcomes: dict[str, int] = {}
        async with Client.from_data_dir(data, url=f"http://127.0.0.1:{port}",
                                        max_attempts=1) as client:
            async def create_one(name: str) -> str:
                try:
                    oid = await client.id_from_name("tenant_quota", name)
                    await client.call("tenant_quota", oid,
                                      QuotaInit(per_minute=10, per_day=100), tenant_id=name)
                    key = "ok"
                except RpcError as e:
                    key = e.code.value if "cannot reach" not in e.message else "no answer"
                outcomes[key] = outcomes.get(key, 0) + 1
                return key

            refused: list[str] = []

            async def create(worker: int) -> None:
                for n in range(worker, ACTORS, 16):
                    if await create_one(f"t{n}") != "ok":
                        refused.append(f"t{n}")

            async with anyio.create_task_group() as tg:
                for w in range(16):
                    tg.start_soon(create, w)
            # What the bound refused is created when asked again: it defers work, never refuses
            # it for good. How much the burst had refused depends on the machine's load (133 of
            # 800 at load 8, a few at rest), so that share is not a test of the node.
            for _ in range(20):
                refused = [name for name in refused if await create_one(name) != "ok"]
            assert refused == [], (refused, outcomes)
        assert set(outcomes) <= {"ok", "overloaded", "unavailable"}, outcomes
        operator = (data / "operator.token").read_text().strip()
        async with HttpPool() as pool:
            status, body = await pool.request(
                f"http://127.0.0.1:{port}", "GET", "/admin/status",
                {"authorization": f"Bearer {operator}"}, b"", timeout_s=10)
        doc = json.loads(body)
        assert status == 200 and doc["nofile_limit"] == HARD
        bound = doc["max_active_actors"]
        assert bound * 3 < HARD and doc["actors_active"] <= bound, doc
        stopped = await anyio.run_process(  # OPS-1: stop works for a single node too
            [sys.executable, "-m", "mailbox_actors", "stop", "--data", str(data)], check=False)
        assert stopped.returncode == 0 and b"stopped" in stopped.stdout, stopped
        assert await anyio.to_thread.run_sync(lambda: proc.wait(timeout=60)) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
