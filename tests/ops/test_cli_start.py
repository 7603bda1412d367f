"""A command line that answers at once (PERF, section 12; OPS-9): what each command imports, read
from ``sys.modules`` in a fresh process after it ran (its speed is the benchmark's ``cli_*``
figures, not a timing here), the version the package states, and a start that is quiet when
nothing is wrong (the default ``max_active_actors`` lowered to fit without a warning)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import mailbox_actors

# What serving a node needs and a command that only prints or asks a node never does.
SERVING = ("mailbox_actors.node", "mailbox_actors.runtime", "mailbox_actors.objects",
           "mailbox_actors.platform.storage", "mailbox_actors.alarms", "mailbox_actors.http.server",
           "structlog", "sqlite3", "aiosqlite")
DECLARATION = ("mailbox_actors.node", "mailbox_actors.node.settings")

_PROGRAM = """
import json, sys
from mailbox_actors.cli import main
try:
    status = main(json.loads(sys.argv[1]))
except SystemExit as e:
    status = e.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _imports(*argv: str) -> tuple[int, set[str]]:
    """Run the command line in a fresh interpreter; its exit status and every module loaded."""
    done = subprocess.run([sys.executable, "-c", _PROGRAM, json.dumps(list(argv))],
                          capture_output=True, text=True, timeout=60)
    last = json.loads(done.stderr.strip().splitlines()[-1])
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
    the runtime, SQLite or the logging library (nothing runs on the directory: each says so); at
    most the node's settings declaration, which their ``--postgres`` flag is described from."""
    data = str(tmp_path / "none")
    for argv in (["status", "--data", data], ["id", "tenant_quota", "--name", "x", "--data", data],
                 ["call", "tenant_quota", "x", '{"op": "usage"}', "--data", data]):
        status, modules = _imports(*argv)
        assert status == 1, argv  # no cluster is running there
        # The settings' declaration (msgspec and the standard library) gives ``--postgres``.
        assert _loaded(modules, SERVING) in ([], [*DECLARATION]), argv
    _status, modules = _imports("status", "--data", data)
    assert _loaded(modules, ("mailbox_actors.rpc.client", "mailbox_actors.wire")) == []


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
