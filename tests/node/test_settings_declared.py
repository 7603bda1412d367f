"""Settings are declared once (CL-4): every setting of serve and cluster has a type, a default and
a description in ``node/settings.py``, and the flags, variables, TOML keys and --help come from it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mailbox_actors.cli import build_parser
from mailbox_actors.node.config import NodeConfig, load_config
from mailbox_actors.node.settings import NodeSettings, declared
from mailbox_actors.runtime.settings import SettingsError


def _sub(name: str) -> argparse.ArgumentParser:
    parser = build_parser(every=True)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_every_setting_is_described_and_node_config_is_the_declaration() -> None:
    """CL-4: no setting without a description; NodeConfig validates exactly the declared ones."""
    names = [s.name for s in declared()]
    assert names == list(NodeConfig.__struct_fields__) == list(NodeSettings.__struct_fields__)
    for s in declared():
        assert len(s.description) > 10, s.name
        assert s.type in (int, float, str, bool) or s.type == tuple[str, ...], s.name


def test_flags_come_from_the_declaration_with_its_help_and_default() -> None:
    """CL-4: serve takes every setting of its scope as a flag, with the description and the
    default in its help; the cluster's own settings are cluster flags; file-only ones are none."""
    serve, cluster, machine = _sub("serve"), _sub("cluster"), _sub("machine")
    for s in declared():
        in_serve = s.flag in serve._option_string_actions
        in_cluster = s.flag in cluster._option_string_actions
        in_machine = s.flag in machine._option_string_actions
        assert in_serve == (s.scope in ("both", "serve")), s.name
        assert in_cluster == (s.scope in ("both", "cluster")), s.name
        assert in_machine == (s.scope in ("both", "machine")), s.name
    ttl = machine._option_string_actions["--lease-ttl-s"]
    assert ttl.type is float and ttl.help is not None and "(default 10.0)" in ttl.help
    port = serve._option_string_actions["--port"]
    assert port.type is int
    assert port.help == "port to listen on (a cluster: node i on this + i) (default 8787)"
    assert serve._option_string_actions["--durability"].choices == ("normal", "full")


def test_a_flag_variable_and_file_reach_the_same_setting(tmp_path: Path) -> None:
    """CL-4: one name, three sources, flags first: --idle-ms, MAILBOX_ACTORS_IDLE_MS, idle_ms."""
    toml = tmp_path / "s.toml"
    toml.write_text("idle_ms = 111\nmax_queue = 7\n")
    cfg = load_config({"idle_ms": 333}, {"MAILBOX_ACTORS_IDLE_MS": "222"}, str(toml))
    assert (cfg.idle_ms, cfg.max_queue) == (333, 7)
    cfg = load_config({}, {"MAILBOX_ACTORS_IDLE_MS": "222"}, str(toml))
    assert cfg.idle_ms == 222
    with pytest.raises(SettingsError, match="idle_ms"):
        load_config({}, {"MAILBOX_ACTORS_IDLE_MS": "soon"}, None)
    # A machine's lease settings (CL-9) come from the same three places.
    toml.write_text("lease_ttl_s = 4.0\nvolumes = '/v'\n")
    cfg = load_config({"machine": "m2"}, {"MAILBOX_ACTORS_LEASE_RENEW_S": "1.5"}, str(toml))
    assert (cfg.machine, cfg.volumes, cfg.lease_ttl_s, cfg.lease_renew_s) == ("m2", "/v", 4.0, 1.5)


def test_the_runtime_gets_every_setting_it_shares_with_the_node(tmp_path: Path) -> None:
    """CL-4: a setting the node and the runtime both have reaches the runtime as it was given,
    without a line of its own in the node's configuration."""
    from mailbox_actors.runtime.settings import RuntimeSettings

    cfg = load_config({"data": str(tmp_path), "idle_ms": 1234, "max_queue": 77,
                       "recipient_cap": 9, "domain_fail_after": 5, "node_name": "n-7"}, {}, None)
    rt = cfg.runtime_settings()
    shared = [n for n in NodeSettings.__struct_fields__ if n in RuntimeSettings.__struct_fields__]
    assert len(shared) > 20
    for name in shared:
        if name not in ("id_secret", "control_db", "queues_db", "postgres"):  # filled in by rules
            assert getattr(rt, name) == getattr(cfg, name), name
    assert (rt.idle_ms, rt.max_queue, rt.recipient_cap, rt.node_name) == (1234, 77, 9, "n-7")
    assert rt.control_db == str(tmp_path / "control.sqlite")


def _parsers_with_postgres() -> dict[str, argparse.ArgumentParser]:
    """Every command (and subcommand) whose parser takes ``--postgres``."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(name: str, p: argparse.ArgumentParser) -> None:
        if "--postgres" in p._option_string_actions:
            found[name] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, child in a.choices.items():
                    walk(f"{name} {sub}".strip(), child)

    walk("", build_parser(every=True))
    return found


def test_every_command_that_takes_postgres_describes_it_from_the_one_declaration() -> None:
    """CL-4, CL-7: ``--postgres`` is declared once (node/settings.py); the commands that read the
    control data (the data commands, ``console``, ``slots``, ``migrate-to-postgres``) say the
    declaration's words and its variable, and take ``--config FILE`` for its TOML key."""
    postgres = next(s for s in declared() if s.name == "postgres")
    said = postgres.description.split(";")[0]
    commands = _parsers_with_postgres()
    assert {"console", "slots", "migrate-to-postgres", "tenant list", "serve", "cluster",
            "machine"} <= set(commands)
    for name, p in commands.items():
        action = p._option_string_actions["--postgres"]
        assert action.help is not None and said in action.help, name
        assert postgres.env in action.help or name in ("serve", "cluster", "machine"), name
        assert "--config" in p._option_string_actions, name


def test_declared_reads_a_direct_structs_own_fields_only() -> None:
    """CL-4: ``declared`` reads a class's own annotations (no ``typing.get_type_hints`` walk at
    every start), so a subclass, whose base's fields it would miss, is refused, not half read."""

    class More(NodeSettings, kw_only=True):
        extra: int = 0

    with pytest.raises(TypeError):
        declared(More)
