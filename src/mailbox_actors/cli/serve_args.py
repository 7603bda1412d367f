"""The flags of ``mailbox-actors serve`` and ``cluster`` (CL-1, CL-2, CL-4), generated from the
settings' one declaration (``node/settings.py``): argparse and msgspec only.

Apart from ``cli/serve.py`` so that a command that only passes these flags on (the cluster's
supervisor, which starts ``serve`` processes) does not import the node, the HTTP server and the
platform objects that serving needs.
"""

from __future__ import annotations

import argparse
from typing import Any

from mailbox_actors.node.settings import Scope, declared

__all__ = ["add_arguments", "add_config_arguments", "flags_of"]


def _add(p: argparse.ArgumentParser, scopes: tuple[Scope, ...]) -> None:
    groups: dict[str, Any] = {}
    for s in declared():
        if s.scope not in scopes:
            continue
        target = p if not s.group else groups.setdefault(s.group, p.add_argument_group(s.group))
        kwargs: dict[str, Any] = {"dest": s.name, "help": s.help()}
        if s.type is bool:
            kwargs |= {"action": "store_const", "const": True}
        elif getattr(s.type, "__origin__", None) is tuple:  # a list: the flag repeats
            kwargs |= {"action": "append", "metavar": s.metavar or None}
        else:
            if s.type is not str:
                kwargs["type"] = s.type
            if s.choices:
                kwargs["choices"] = s.choices
            if s.metavar:
                kwargs["metavar"] = s.metavar
        target.add_argument(s.flag, **kwargs)


def add_config_arguments(p: argparse.ArgumentParser, *, command: Scope = "both") -> None:
    """The settings both commands take, then ``command``'s own; and ``--config``."""
    p.add_argument("--config", help="TOML file of settings (flags and MAILBOX_ACTORS_* win)")
    _add(p, ("both",) if command == "both" else ("both", command))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``serve``'s flags."""
    add_config_arguments(p, command="serve")
    p.add_argument("--peers", help=argparse.SUPPRESS)  # name=url,... set by the cluster supervisor


def flags_of(args: argparse.Namespace) -> dict[str, Any]:
    """The declared settings given on the command line (those not given are None)."""
    return {s.name: getattr(args, s.name) for s in declared() if hasattr(args, s.name)}
