"""The ``mailbox-actors`` command line: one subcommand per module, dispatched from here.

Exit status: 0 success, 1 the operation failed (an ``err`` result), 2 a usage error.

Start-up is part of every command (PERF, section 12: ``--version`` within 0.3x of the runtime
libraries' import floor, ``status`` within 1.2x), so this module imports nothing of the package:
``SUBCOMMANDS`` names each command's module as text, and only the chosen command's module is
imported, to add its arguments and to run it. ``--version`` and ``--help`` import none.

To add a command, add one row to ``SUBCOMMANDS`` (module, its add-arguments function, its
``run(args) -> int`` function, one line of help); keep heavy imports (the node, the objects,
aiosmtplib, psycopg) inside the functions that need them, or in a module only that command
imports, so that its parser builds fast and other commands never pay for it.
``tests/ops/test_cli_start.py`` checks what ``--version``, ``--help``, ``status``, ``id`` and
``call`` import.
"""

from __future__ import annotations

import importlib
import os
import sys

TYPE_CHECKING = False  # not typing's (a third of `--version`); type checkers take it as true
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any

__all__ = ["main"]

# subcommand -> (module, its add-arguments function, its run(args) -> int function, help)
SUBCOMMANDS: dict[str, tuple[str, str, str, str]] = {
    "serve": ("mailbox_actors.cli.serve", "add_arguments", "run", "run one node"),
    "cluster": ("mailbox_actors.cli.cluster", "add_arguments", "run",
                "run a local cluster of node processes (restarts nodes that die)"),
    "stop": ("mailbox_actors.cli.stop", "add_arguments", "run",
             "stop the cluster (or node) running on a data directory"),
    "status": ("mailbox_actors.cli.status", "add_status_arguments", "run_status",
               "show nodes, pids, restarts, active actors and pending alarms"),
    "id": ("mailbox_actors.cli.remote", "add_id_arguments", "run_id",
           "print the object id for a name"),
    "call": ("mailbox_actors.cli.remote", "add_call_arguments", "run_call",
             "call an object and print the result (exit 0 ok, 1 err, 2 usage)"),
    "tenant": ("mailbox_actors.cli.remote", "add_tenant_arguments", "run_tenant",
               "create or list tenants in the control database"),
    "domain": ("mailbox_actors.cli.domain", "add_arguments", "run",
               "add a sending domain, check its DNS records now, or show its status"),
    "identity": ("mailbox_actors.cli.remote", "add_identity_arguments", "run_identity",
                 "create an identity: mint its IdentityMailbox, store it, send init"),
    "openapi": ("mailbox_actors.cli.remote", "add_openapi_arguments", "run_openapi",
                "print the OpenAPI 3.1 document of the HTTP interface"),
    "send": ("mailbox_actors.cli.mail", "add_send_arguments", "run_send",
             "submit an email from an identity and print its receipt (--wait: follow it)"),
    "deliveries": ("mailbox_actors.cli.mail", "add_deliveries_arguments", "run_deliveries",
                   "page through an identity's delivery records (operator token)"),
    "migrate-to-postgres": ("mailbox_actors.cli.migrate_to_postgres", "add_arguments", "run",
                            "copy a stopped cluster's control data and queues into PostgreSQL"),
    "console": ("mailbox_actors.console.command", "add_arguments", "run",
                "serve the web console over the cluster on a data directory (operator token)"),
    "actors": ("mailbox_actors.cli.actors", "add_arguments", "run",
               "inspect actors read-only: namespaces, list, show, rows, kv, outbox (operator)"),
    "machine": ("mailbox_actors.cli.machine", "add_arguments", "run",
                "run one machine of a cluster on many machines (slots leased in PostgreSQL)"),
    "slots": ("mailbox_actors.cli.machine", "add_slots_arguments", "run_slots",
              "create a many-machine cluster's slots once, show who holds what, drain a machine"),
    "messages": ("mailbox_actors.cli.messages", "add_arguments", "run",
                 "read an identity's received mail: list, show, raw, attachment, thread, search, "
                 "wait"),
    "queues": ("mailbox_actors.cli.queues", "add_queues_arguments", "run_queues",
               "list a queue's dead letters or redrive them (operator token)"),
    "events": ("mailbox_actors.cli.queues", "add_events_arguments", "run_events",
               "follow a tenant's events as the event index receives them (operator token)"),
    "bench": ("mailbox_actors.bench.command", "add_arguments", "run",
              "measure the runtime against the physical limits"),
}


def _version() -> str:
    # The package's own constant: importlib.metadata costs about 35 ms of imports and a scan of
    # sys.path (tests/ops/test_cli_start.py checks it against pyproject.toml).
    from mailbox_actors import __version__

    return __version__


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` says it (``$COLUMNS``, else standard
    output's terminal, else 80), without importing shutil: it imports zlib, bz2 and lzma, three
    shared libraries every command would load for a number."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def build_parser(only: str | None = None, *, every: bool = False,
                 alone: bool = False) -> argparse.ArgumentParser:
    """The parser. Only the ``only`` subcommand's module is imported and its arguments added
    (start-up stays fast, and one subcommand's imports cannot break another); ``every`` adds
    every subcommand's arguments (documentation and tests that read them all). ``alone``: the
    ``only`` subcommand is the sole one added, for a command line that names it first (nothing
    then reads the others: no top-level option, and no choice to list in an error)."""
    import argparse  # not at import: `--version` answers without it

    # Found once a parser: argparse makes a formatter at every argument added (serve has sixty),
    # and off a terminal each asking would be a system call and an exception.
    columns = _columns() - 2

    class Formatter(argparse.HelpFormatter):
        def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                     width: int | None = None) -> None:
            super().__init__(prog, indent_increment, max_help_position,
                             columns if width is None else width)

    class Parser(argparse.ArgumentParser):  # every parser and subparser formats with Formatter
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("formatter_class", Formatter)
            super().__init__(*args, **kwargs)

    parser = Parser(
        prog="mailbox-actors",
        description="A Python runtime that emulates Cloudflare Durable Objects.")
    parser.add_argument("--version", action="version", version=f"mailbox-actors {_version()}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, add, _run, help_text) in SUBCOMMANDS.items():
        if alone and name != only:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        if every or name == only:
            getattr(importlib.import_module(module), add)(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # the one answer that needs no parser (argparse imports gettext,
        print(f"mailbox-actors {_version()}")  # and a parser asks for the terminal's width)
        return 0
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen == "serve":
        # A start allocates much and frees little (modules, classes, settings): the cyclic
        # collector's passes over it are wasted work (4% of serve's start in instructions).
        # serve turns it back on once it listens, freezing what the start made first.
        import gc

        gc.disable()
    # A command named first is the only one the parser needs (its help, its errors); a top-level
    # option before it (--help) lists them all.
    args: Any = None
    if chosen == "serve" and argv[0] == chosen:  # flags written out in full: read without argparse
        from mailbox_actors.cli.serve_args import read_serve_flags

        args = read_serve_flags(argv[1:])
    if args is None:
        parser = build_parser(chosen if chosen in SUBCOMMANDS else None,
                              alone=chosen in SUBCOMMANDS and argv[0] == chosen)
        args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    # OPS-5: whatever a command creates (data directories, actor files, the control database,
    # tokens, logs of SQLite) is the operator's alone: directories 0700, files 0600.
    os.umask(0o077)
    module, _add, run, _help = SUBCOMMANDS[args.command]
    command = importlib.import_module(module)
    if "mailbox_actors.platform.logging" in sys.modules:
        # Logs go to stderr, so a command's own output on stdout stays parseable; serve and
        # cluster configure their own. A command whose modules log nothing (status, id, call)
        # never imports the logging module for it.
        from mailbox_actors.platform.logging import configure_logging

        configure_logging(level="warning")
    try:
        status = int(getattr(command, run)(args))
        sys.stdout.flush()  # a reader that went away is found here, not at exit
        return status
    except KeyboardInterrupt:
        return 130
    except ValueError as e:
        from mailbox_actors.runtime.settings import SettingsError

        if not isinstance(e, SettingsError):
            raise
        # A setting's fault found once the command ran (a --postgres DSN that does not connect).
        print(f"mailbox-actors {args.command}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output closed it (`status --json | head`): stop quietly, as a Unix
        # tool does on SIGPIPE. Python would otherwise complain again when it flushes at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141


if __name__ == "__main__":
    sys.exit(main())
