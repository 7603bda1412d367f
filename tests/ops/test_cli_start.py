"""A command line that answers at once (PERF, section 12; OPS-9): what each command imports, read
from ``sys.modules`` in a fresh process after it ran (its speed is the benchmark's ``cli_*``
figures, not a timing here), the version the package states, and a start that is quiet when
nothing is wrong (the default ``max_active_actors`` lowered to fit without a warning)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import mailbox_actors
from live_node import OPERATOR, TOKEN
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.node.app import NodeApp
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.rpc.openapi import openapi_json
from mailbox_actors.testing import TestRuntime

# What serving a node needs and a command that only prints or asks a node never does.
SERVING = ("mailbox_actors.node", "mailbox_actors.runtime", "mailbox_actors.objects",
           "mailbox_actors.platform.storage", "mailbox_actors.alarms", "mailbox_actors.http.server",
           "structlog", "sqlite3", "aiosqlite")
# What the commands that read the control data take their ``--postgres`` flag from.
POSTGRES_FLAG = ["mailbox_actors.node", "mailbox_actors.node.postgres_flag"]
# Loaded for nothing a command that asks a node uses: SQLite's setting (ctypes and the library),
# argparse's terminal width (shutil: zlib, bz2, lzma), the IDNA codec for an ASCII host, the json
# module (msgspec reads what it reads), the settings' declaration.
NEEDLESS = ("ctypes", "_sqlite3", "shutil", "bz2", "lzma", "encodings.idna", "json",
            "mailbox_actors.node.settings")

# The modules are read after the command, before anything else is imported; the result goes to a
# file (the command's own output and logs stay apart).
_PROGRAM = """
import sys
from mailbox_actors.cli import main
try:
    status = main(sys.argv[2:])
except SystemExit as e:
    status = e.code
modules = sorted(sys.modules)
import json
with open(sys.argv[1], "w") as f:
    json.dump({"status": status, "modules": modules}, f)
"""


def _imports(*argv: str, env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    """Run the command line in a fresh interpreter; its exit status and every module loaded."""
    with tempfile.TemporaryDirectory() as d:
        result = Path(d) / "result.json"
        subprocess.run([sys.executable, "-c", _PROGRAM, str(result), *argv], capture_output=True,
                       text=True, timeout=60, env=env)
        last = json.loads(result.read_text())
    return int(last["status"] or 0), set(last["modules"])


def _loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_version_imports_no_serving_module_and_no_parser() -> None:
    """``--version`` imports none of the serving modules, no command's module, and not even
    argparse or the event loop: it is the interpreter's start and the package's ``__init__``."""
    status, modules = _imports("--version")
    assert status == 0
    assert _loaded(modules, (*SERVING, "mailbox_actors.cli.serve", "mailbox_actors.cli.remote",
                             "mailbox_actors.bench", "asyncio", "anyio", "msgspec", "argparse",
                             "importlib.metadata", "typing")) == []


def test_help_imports_no_command_module() -> None:
    """``--help`` lists the commands from the command table without importing any of them."""
    status, modules = _imports("--help")
    assert status == 0
    commands = sorted(m for m in modules if m.startswith("mailbox_actors.cli."))
    assert commands == []
    assert _loaded(modules, (*SERVING, "asyncio", "anyio", "msgspec")) == []


def test_status_id_and_call_import_no_serving_module(tmp_path: Path) -> None:
    """``status``, ``id`` and ``call`` import the HTTP client and what they print, never the node,
    the runtime, SQLite or the logging library (nothing runs on the directory: each says so); of
    the node's package only the ``--postgres`` flag's module."""
    data = str(tmp_path / "none")
    for argv in (["status", "--data", data], ["id", "tenant_quota", "--name", "x", "--data", data],
                 ["call", "tenant_quota", "x", '{"op": "usage"}', "--data", data]):
        status, modules = _imports(*argv)
        assert status == 1, argv  # no cluster is running there
        assert _loaded(modules, SERVING) == POSTGRES_FLAG, argv
        assert _loaded(modules, ("ctypes", "_sqlite3", "mailbox_actors.node.settings")) == [], argv
    _status, modules = _imports("status", "--data", data)
    assert _loaded(modules, ("mailbox_actors.rpc.client", "mailbox_actors.wire")) == []


@pytest.fixture
async def node_url(tmp_path: Path) -> AsyncIterator[str]:
    """A node answering HTTP on loopback (its operator token is ``OPERATOR``)."""
    async with TestRuntime(tmp_path / "node") as rt:
        app = NodeApp(rt.node, cluster_token=TOKEN, operator_token=OPERATOR,
                      openapi=openapi_json(DEFAULT_OBJECTS, "test"))
        server = RpcHttpServer(app, max_body_bytes=1 << 20, request_timeout_s=10)
        port = await server.start("127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await server.stop()


@pytest.mark.anyio
async def test_status_asks_a_node_with_only_what_it_uses(tmp_path: Path, node_url: str) -> None:
    """PERF (section 12), CL-3: ``status`` of a running node prints its row and exits 0, having
    loaded neither the serving stack nor what it never uses (ctypes and SQLite, shutil and its
    compressors, the IDNA codec, the json module, the settings' declaration, the event loop and
    the pooled HTTP client: it asks each node one GET in turn); ``--json`` prints the same
    through the json module."""
    env = os.environ | {"MAILBOX_ACTORS_OPERATOR_TOKEN": OPERATOR}
    argv = ("status", "--data", str(tmp_path / "none"), "--url", node_url)
    status, modules = await anyio.to_thread.run_sync(lambda: _imports(*argv, env=env))
    assert status == 0
    assert _loaded(modules, SERVING) == POSTGRES_FLAG
    assert _loaded(modules, NEEDLESS) == []
    # One GET a node, in turn, on a blocking socket: no event loop, no pooled client, no TLS.
    assert _loaded(modules, ("asyncio", "anyio", "mailbox_actors.http", "mailbox_actors.rpc.client",
                             "ssl")) == []
    done = await anyio.run_process([sys.executable, "-m", "mailbox_actors", *argv, "--json"],
                                   env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodes"][0]["status"] == "ok"


def test_the_stated_version_is_the_distributions() -> None:
    """``mailbox_actors.__version__`` (what ``--version`` prints without importlib.metadata) is
    pyproject.toml's version."""
    pyproject = Path(mailbox_actors.__file__).resolve().parents[2] / "pyproject.toml"
    assert mailbox_actors.__version__ == tomllib.loads(pyproject.read_text())["project"]["version"]


_QUIET = """
import io, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (512, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import anyio
from mailbox_actors.node import Node
from mailbox_actors.platform.logging import configure_logging
from mailbox_actors.runtime.settings import RuntimeSettings

out = io.StringIO()
configure_logging(json=True, stream=out)
extra = {"max_active_actors": int(sys.argv[2])} if len(sys.argv) > 2 else {}
node = Node(RuntimeSettings(data_dir=sys.argv[1], **extra))
print(node.settings.max_active_actors, out.getvalue().count("max_active_actors_bounded"))
"""


def test_the_default_bound_fits_the_machine_without_a_warning(tmp_path: Path) -> None:
    """OPS-4: with 512 descriptors the default ceiling (10,000) is lowered to what they allow
    without a warning; a value an operator chose that does not fit is warned about."""
    def run(*extra: str) -> list[int]:
        done = subprocess.run([sys.executable, "-c", _QUIET, str(tmp_path / "d"), *extra],
                              capture_output=True, text=True, timeout=60, check=True)
        return [int(x) for x in done.stdout.split()]

    bound, warnings = run()
    assert bound == (512 - 128) // 3 and warnings == 0
    bound, warnings = run("5000")
    assert bound == (512 - 128) // 3 and warnings == 1


def test_a_command_named_first_parses_alone_and_the_help_still_lists_every_command() -> None:
    """OPS-9: a command named first builds only its own parser, which changes nothing one sees:
    ``-h status`` lists every command, ``status -h`` is the command's help, an unknown command is
    refused with every choice named."""
    from mailbox_actors.cli import SUBCOMMANDS

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mailbox_actors", *argv],
                              capture_output=True, text=True, timeout=60)

    top = run("-h", "status")
    assert top.returncode == 0
    assert all(name in top.stdout for name in SUBCOMMANDS)
    own = run("status", "-h")
    assert own.returncode == 0
    assert own.stdout.startswith("usage: mailbox-actors status")
    assert "--json" in own.stdout and "identity" not in own.stdout
    unknown = run("statu")
    assert unknown.returncode == 2
    assert "invalid choice: 'statu'" in unknown.stderr
    assert all(repr(name) in unknown.stderr for name in SUBCOMMANDS)


def test_help_wraps_at_the_terminal_width_as_argparse_measures_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's help is argparse's own, at the width argparse would take
    (``$COLUMNS``, else the terminal's, else 80), measured without importing shutil."""
    import argparse

    from mailbox_actors.cli import build_parser

    for columns in ("60", "200", None):
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        parser = build_parser(every=True)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for p in (parser, *sub.choices.values()):
            ours = p.format_help()
            p.formatter_class = argparse.HelpFormatter
            assert ours == p.format_help(), (columns, p.prog)


def test_sqlite_is_configured_as_it_is_imported_not_before() -> None:
    """ADR 0012: importing the package loads neither ctypes nor SQLite; whatever imports
    ``sqlite3`` after it (here aiosqlite) finds the page cache's bulk allocation already off."""
    program = ("import sys, mailbox_actors\n"
               "before = [m for m in ('ctypes', '_sqlite3') if m in sys.modules]\n"
               "import aiosqlite\n"
               "from mailbox_actors.platform.sqlite_library import page_cache_configured\n"
               "print(before, page_cache_configured())\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == ["[]", "True"]
