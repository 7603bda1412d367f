"""``mailbox-actors serve`` as a real process: start-up output, a call, settings validation and a
graceful stop on SIGTERM (CL-1, CL-3, CL-4, RT-11)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from child_output import Lines, _port
from mailbox_actors.rpc import Client
from mailbox_actors.wire.quota import QuotaInit, QuotaUsage


@pytest.mark.anyio
async def test_serve_prints_where_it_listens_serves_and_stops_gracefully(tmp_path: Path) -> None:
    """One node: start-up prints address, data and token files (tokens generated with mode
    0600); it answers calls; SIGTERM drains and stops it with status 0 (CL-1, CL-3, RT-11)."""
    data = tmp_path / "node"
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "mailbox_actors", "serve", "--data", str(data),  # noqa: ASYNC220
                             "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = Lines(proc)
    try:
        out = lines.until("operator token in")
        text = "\n".join(out)
        assert f"listening on http://127.0.0.1:{port}" in text
        assert f"data in {data}" in text
        for name in ("cluster.token", "operator.token"):
            assert (data / name).stat().st_mode & 0o777 == 0o600
            assert str(data / name) in text
        async with Client(f"http://127.0.0.1:{port}",
                          (data / "cluster.token").read_text().strip()) as c:
            qid = await c.id_from_name("tenant_quota", "acme")
            await c.call("tenant_quota", qid, QuotaInit(per_minute=2, per_day=9), tenant_id="a")
            assert (await c.call("tenant_quota", qid, QuotaUsage(), tenant_id="a"))[
                "minute_limit"] == 2
        proc.send_signal(signal.SIGTERM)
        rest = await anyio.to_thread.run_sync(lambda: lines.until("stopped"))
        assert any("draining" in line for line in rest)
        assert await anyio.to_thread.run_sync(lambda: proc.wait(timeout=30)) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["--port", "70000"], {}, "'port'"),
    ([], {"MAILBOX_ACTORS_IDLE_MS": "soon"}, "MAILBOX_ACTORS_IDLE_MS"),
    ([], {"MAILBOX_ACTORS_LOG_LEVEL": "loud"}, "'log_level'"),
])
def test_bad_settings_are_refused_at_start_naming_the_setting(
        tmp_path: Path, args: list[str], env: dict[str, str], needle: str) -> None:
    """A bad flag or environment variable stops ``serve`` at start with exit status 2 and a
    message naming the setting (CL-4)."""
    out = subprocess.run([sys.executable, "-m", "mailbox_actors", "serve", "--data",
                          str(tmp_path / "d"), *args], capture_output=True, text=True,
                         timeout=60, env=os.environ | env)
    assert out.returncode == 2
    assert needle in out.stderr


def test_toml_file_is_read_and_flags_win(tmp_path: Path) -> None:
    """Settings come from flags, then MAILBOX_ACTORS_* variables, then the TOML file (CL-4)."""
    from mailbox_actors.node.config import load_config

    toml = tmp_path / "m.toml"
    toml.write_text('port = 9001\nidle_ms = 5000\nlog_level = "error"\n')
    cfg = load_config({"port": 9100}, {"MAILBOX_ACTORS_IDLE_MS": "7000"}, str(toml))
    assert (cfg.port, cfg.idle_ms, cfg.log_level) == (9100, 7000, "error")
    toml.write_text("colour = 1\n")
    with pytest.raises(ValueError, match="unknown setting 'colour'"):
        load_config({}, {}, str(toml))
    assert json.dumps(cfg.runtime_settings(str(tmp_path)).control_db).endswith('control.sqlite"')


def test_a_node_that_fails_to_start_closes_what_it_opened_and_exits(tmp_path: Path) -> None:
    """CL-1, RT-11: a start that fails after the control database was opened (here the queue file
    cannot be opened: its path is a directory) ends the process with the error; nothing left open
    keeps it alive."""
    (tmp_path / "queues-is-a-dir").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "mailbox_actors", "serve", "--data", str(tmp_path / "data"),
         "--port", str(_port()), "--control-db", str(tmp_path / "control.sqlite"),
         "--queues-db", str(tmp_path / "queues-is-a-dir")],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "queue database" in proc.stderr and "cannot be opened" in proc.stderr
    assert (tmp_path / "control.sqlite").exists()  # it was opened before the failure


def test_a_port_in_use_is_refused_as_a_setting(tmp_path: Path) -> None:
    """CL-1, CL-4: a port another process listens on stops serve with exit status 2 and a message
    naming the address (no traceback), so a supervisor does not restart it forever."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mailbox_actors", "serve", "--data", str(tmp_path / "d"),
             "--port", str(port)], capture_output=True, text=True, timeout=60)
    finally:
        holder.close()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
