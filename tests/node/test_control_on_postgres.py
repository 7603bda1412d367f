"""A cluster run with ``--postgres`` keeps its control data there (CL-7); a command later given its
data directory without the DSN must not make a DATA/control.sqlite nobody reads: it exits 2 naming
the setting and where the data are, never the password."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mailbox_actors.console.cluster_view import ClusterView
from mailbox_actors.node.shared_state import ON_POSTGRES, control_on_postgres, shared_state
from mailbox_actors.platform.clock import SystemClock
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.rng import SystemRng
from mailbox_actors.runtime.settings import RuntimeSettings, SettingsError

DSN = "postgresql://ma:s3cret-word@127.0.0.1:5999/mail"


def _settings(data: Path, postgres: str | None) -> RuntimeSettings:
    return RuntimeSettings(data_dir=str(data / "node-0"), control_db=str(data / "control.sqlite"),
                           queues_db=str(data / "queues.sqlite"), postgres=postgres)


def _state(data: Path, postgres: str | None) -> None:
    clock = SystemClock()
    assert shared_state(_settings(data, postgres), clock=clock, ids=Ids(clock, SystemRng()),
                        metrics=None) is not None


def test_a_node_on_postgres_says_so_in_its_data_directory_without_the_password(
        tmp_path: Path) -> None:
    _state(tmp_path, DSN)
    assert "s3cret" not in (tmp_path / ON_POSTGRES).read_text()
    assert control_on_postgres(tmp_path) == "host=127.0.0.1 port=5999 dbname=mail user=ma"
    _state(tmp_path, None)  # the same cluster run on its SQLite files again
    assert control_on_postgres(tmp_path) is None and not (tmp_path / ON_POSTGRES).exists()


def test_a_data_command_without_the_dsn_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    _state(tmp_path, DSN)
    for cmd in (["tenant", "create", "acme"], ["tenant", "list"],
                ["identity", "create", "--tenant", "acme", "--name", "bob"]):
        proc = subprocess.run([sys.executable, "-m", "mailbox_actors", *cmd, "--data",
                               str(tmp_path)], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin"})
        assert proc.returncode == 2, proc.stderr
        assert "setting 'postgres'" in proc.stderr and "dbname=mail" in proc.stderr
        assert "s3cret" not in proc.stderr + proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [ON_POSTGRES]


def test_the_console_without_the_dsn_is_refused_too(tmp_path: Path) -> None:
    _state(tmp_path, DSN)
    with pytest.raises(SettingsError, match="setting 'postgres'"):
        ClusterView(tmp_path, [("node-0", "http://127.0.0.1:1")], cluster_token="c" * 32,
                    operator_token="o" * 32)
    assert not (tmp_path / "control.sqlite").exists()


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mailbox_actors", *args], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **(env or {})})


@pytest.mark.slow
def test_the_config_files_postgres_key_reaches_the_data_commands(tmp_path: Path) -> None:
    """CL-7: ``postgres`` in the cluster's TOML file serves the commands that read the control
    data too (``--config FILE`` or ``MAILBOX_ACTORS_CONFIG``), by serve's precedence: the flag,
    then ``MAILBOX_ACTORS_POSTGRES``, then the file."""
    from _pg import new_database, serving

    with serving() as server:
        dsn = new_database(server)
        config = tmp_path / "cluster.toml"
        config.write_text(f"postgres = {json.dumps(dsn)}\n")
        data = tmp_path / "data"
        data.mkdir()
        made = _run("tenant", "create", "acme", "--data", str(data), "--config", str(config))
        assert made.returncode == 0, made.stderr
        listed = _run("tenant", "list", "--data", str(data),
                      env={"MAILBOX_ACTORS_CONFIG": str(config)})
        assert listed.returncode == 0, listed.stderr
        assert [t["name"] for t in json.loads(listed.stdout)] == ["acme"]
        assert list(data.iterdir()) == []  # nothing written in DATA: no control.sqlite
        slots = _run("slots", "status", "--json", "--config", str(config))
        # slots read the same key: the file's database answered (it holds no slots yet)
        assert slots.returncode == 2 and "holds no cluster" in slots.stderr, slots.stderr
        elsewhere = "postgresql://nobody@127.0.0.1:1/none"
        beaten = _run("tenant", "list", "--data", str(data), "--config", str(config),
                      env={"MAILBOX_ACTORS_POSTGRES": elsewhere})
        assert beaten.returncode == 2 and "setting 'postgres'" in beaten.stderr
        config.write_text("postgres = 5\n")
        bad = _run("tenant", "list", "--data", str(data), "--config", str(config))
        assert bad.returncode == 2 and "must be a connection string" in bad.stderr
