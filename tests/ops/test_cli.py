"""The command line an operator drives (OPS-5, OPS-8, OPS-9) against real processes: ``--version``,
help on every flag, a closed pipe ends a command quietly, tokens from MAILBOX_ACTORS_TOKEN for every
command, unique tenant names, tenants by name or id, webhook secrets from a file, the environment
or standard input, a generated id secret per data directory, and private files."""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster_proc import Cluster
from mailbox_actors.cli import build_parser
from mailbox_actors.core.actor_ids import id_from_name, namespace_key
from mailbox_actors.node.config import ensure_id_secret, load_config
from mailbox_actors.runtime.settings import DEFAULT_ID_SECRET


def _cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                          text=True, timeout=120, input=stdin,
                          env=None if env is None else {**os.environ, **env})


def test_version_and_help_text_on_every_flag() -> None:
    """OPS-9: ``--version`` prints the version and exits 0; every flag and argument of every
    command has help text (the supervisor's internal --peers is hidden on purpose)."""
    done = _cli("--version")
    assert done.returncode == 0 and done.stdout.startswith("mailbox-actors "), done
    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not action.help:
                missing.append(" ".join([*path, *(action.option_strings or [action.dest])]))

    walk(build_parser(every=True), [])
    assert missing == []


def test_a_closed_pipe_ends_a_command_quietly() -> None:
    """OPS-9: a command whose reader has gone (``| head`` that exited) ends without a traceback
    or a message, with the status a Unix tool killed by SIGPIPE has (141). Standard output is a
    pipe whose read end is already closed, so the first write fails."""
    program = ("import os, sys\n"
               "r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
               "from mailbox_actors.cli import main\n"
               "sys.exit(main(['openapi']))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (141, "")


def test_the_id_secret_is_generated_per_data_directory(tmp_path: Path) -> None:
    """OPS-8: without a configured id_secret each data directory gets its own, generated into
    DATA/id.secret with mode 0600 and read back on the next start; one configured wins and
    writes nothing; a directory started before the file existed keeps the built-in secret (its
    ids must not change)."""
    cfg = load_config({}, env={})
    first, path = ensure_id_secret(cfg, tmp_path / "a")
    assert path == str(tmp_path / "a" / "id.secret") and len(first) >= 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ensure_id_secret(cfg, tmp_path / "a") == (first, path)
    other, _ = ensure_id_secret(cfg, tmp_path / "b")
    assert other != first and DEFAULT_ID_SECRET not in (first, other)
    given = load_config({}, env={"MAILBOX_ACTORS_ID_SECRET": "given-secret-0123456789"})
    assert ensure_id_secret(given, tmp_path / "c") == ("given-secret-0123456789", None)
    assert not (tmp_path / "c" / "id.secret").exists()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "cluster.token").write_text("x" * 40)
    assert ensure_id_secret(cfg, tmp_path / "old")[0] == DEFAULT_ID_SECRET


def _modes(root: Path) -> list[str]:
    wrong = []
    for p in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        if (p.is_dir() and mode != 0o700) or (p.is_file() and mode != 0o600):
            wrong.append(f"{p.relative_to(root)} {oct(mode)}")
    return wrong


@pytest.mark.slow
def test_an_operator_drives_a_cluster_whose_token_is_in_the_environment(tmp_path: Path) -> None:
    """OPS-5, OPS-8, OPS-9, CL-4: a cluster started with its tokens in the environment is driven
    by every command that has MAILBOX_ACTORS_TOKEN; without it they say where a token comes from.
    A second tenant of the same name is a conflict; identity create and call take the tenant's
    name; webhook secrets come from a file, standard input or the environment and are stored; the
    cluster's ids come from its generated id secret; every file under DIR is 0600 and every
    directory 0700; ``status --json | head`` ends quietly; after stop, commands say no cluster
    runs."""
    token, operator = "env-cluster-token-0123456789", "env-operator-token-0123456789"
    env = {"MAILBOX_ACTORS_TOKEN": token, "MAILBOX_ACTORS_OPERATOR_TOKEN": operator}
    data = tmp_path / "cluster"
    c = Cluster(data, 2, env=env)
    try:
        c.wait_running()
        assert not (data / "cluster.token").exists()
        d = str(data)
        no_token = _cli("identity", "create", "--tenant", "acme", "--name", "x", "--data", d)
        assert no_token.returncode == 2 and "MAILBOX_ACTORS_TOKEN" in no_token.stderr

        secret_file = tmp_path / "whsec"
        secret_file.write_text("file-secret-0123456789\n")
        made: dict[str, Any] = {}
        for name, extra, kw in (
                ("acme", ["--webhook-secret-file", str(secret_file)], {}),
                ("globex", ["--webhook-secret", "-"], {"stdin": "stdin-secret-0123456789\n"}),
                ("initech", [], {"env": {"MAILBOX_ACTORS_WEBHOOK_SECRET": "env-secret-012345"}})):
            done = _cli("tenant", "create", name, "--webhook-url", "http://127.0.0.1:9/h",
                        *extra, "--data", d, **kw)
            assert done.returncode == 0, done.stderr
            made[name] = json.loads(done.stdout)
        again = _cli("tenant", "create", "acme", "--data", d)
        assert again.returncode == 1 and "conflict" in again.stderr, again
        import sqlite3

        with sqlite3.connect(data / "control.sqlite") as db:
            stored = dict(db.execute("SELECT name, webhook_secret FROM tenants").fetchall())
        assert stored == {"acme": "file-secret-0123456789", "globex": "stdin-secret-0123456789",
                          "initech": "env-secret-012345"}

        ident = _cli("identity", "create", "--tenant", "acme", "--name", "support", "--data", d,
                     env=env)
        assert ident.returncode == 0, ident.stderr
        assert json.loads(ident.stdout)["tenant_id"] == made["acme"]["id"]
        quota = _cli("id", "tenant_quota", "--name", "acme", "--data", d, env=env)
        assert quota.returncode == 0, quota.stderr
        secret = (data / "id.secret").read_text().strip()
        assert quota.stdout.strip() == id_from_name(
            namespace_key("tenant_quota", secret.encode()), "acme")
        call = _cli("call", "tenant_quota", "acme",
                    '{"op":"init","per_minute":5,"per_day":50}', "--tenant", "acme",
                    "--data", d, env=env)
        assert call.returncode == 0, call.stdout + call.stderr
        usage = _cli("call", "tenant_quota", "acme", '{"op":"status"}', "--tenant",
                     made["acme"]["id"], "--data", d, env=env)
        assert usage.returncode == 0, usage.stdout + usage.stderr  # the id is the same owner

        head = subprocess.run(
            f"{sys.executable} -m mailbox_actors status --json --data {d} | head -c 10",
            shell=True, capture_output=True, text=True, timeout=60, env={**os.environ, **env})
        assert head.stdout == '{\n  "nodes' and head.stderr == "", head
        assert _modes(data) == []
        stopped = _cli("stop", "--data", d)
        assert stopped.returncode == 0, stopped
        assert c.proc.wait(timeout=60) == 0
    finally:
        c.stop()
    after = _cli("call", "tenant_quota", "acme", '{"op":"status"}', "--data", str(data),
                 env=env)
    assert after.returncode == 1 and "no cluster is running" in after.stderr, after


def test_the_client_says_plainly_when_no_cluster_runs(tmp_path: Path) -> None:
    """OPS-9: ``Client.from_data_dir`` on a directory where nothing runs (no cluster.json, no
    lock held) says so, instead of handing back a client whose calls fail as "node-0
    unreachable"; ``send`` and the other commands built on it inherit that."""
    from mailbox_actors.rpc import Client, RpcError

    (tmp_path / "cluster.token").write_text("t" * 32)
    with pytest.raises(RpcError) as e:
        Client.from_data_dir(tmp_path)
    assert e.value.code.value == "unavailable" and "no cluster is running" in e.value.message


@pytest.mark.anyio
async def test_an_embedded_runtime_keeps_its_files_private(tmp_path: Path) -> None:
    """OPS-5 without the command line's umask (pytest runs with 022): every directory a runtime
    makes in its data directory is 0700 and every file 0600 (actor files and their logs, the alarm
    index, the control database, the queue file, the lock)."""
    from mailbox_actors.testing import TestRuntime
    from mailbox_actors.wire.quota import QuotaInit

    async with TestRuntime(tmp_path / "rt", control=True) as rt:
        oid = rt.id_from_name("tenant_quota", "acme")
        await rt.call("tenant_quota", oid, QuotaInit(per_minute=1, per_day=1), tenant_id="acme")
        root = rt.node.settings.path
        # The directory itself is the caller's (TestRuntime's temporary one), and so is the
        # test kit's own run counter.
        wrong = [w for w in _modes(root) if not w.startswith((". ", ".testruntime-runs "))]
        names = {p.name for p in root.rglob("*")}
    assert {"alarms.sqlite", "control.sqlite", "queues.sqlite", f"{oid}.sqlite"} <= names
    assert wrong == []
