"""The flags of ``mailbox-actors serve`` and ``cluster`` (CL-1, CL-2, CL-4), generated from the
settings' one declaration (``node/settings.py``): argparse and msgspec only. A command line of
``serve`` whose flags are all written out in full is read without argparse (``read_serve_flags``),
as argparse reads it; anything else goes to argparse, for its reading and its messages.

Apart from ``cli/serve.py`` so that a command that only passes these flags on (the cluster's
supervisor, which starts ``serve`` processes) does not import the node, the HTTP server and the
platform objects that serving needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from mailbox_actors.node.settings import Scope, declared

if TYPE_CHECKING:
    import argparse

__all__ = ["add_arguments", "add_config_arguments", "flags_of", "read_serve_flags"]

# serve's flags that are no setting (add_arguments), each with its value
_SERVE_ONLY = {"--config": "config", "--peers": "peers"}


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
    import argparse

    add_config_arguments(p, command="serve")
    p.add_argument("--peers", help=argparse.SUPPRESS)  # name=url,... set by the cluster supervisor


def read_serve_flags(argv: Sequence[str]) -> SimpleNamespace | None:
    """``serve``'s flags (``argv`` after ``serve``) as argparse reads them (``add_arguments``),
    when each is written out in full with its value (``--port 0``, ``--port=0``, ``--dev``);
    None for anything else (``--help``, a shortened or unknown flag, a missing value, one that
    begins with ``-``, does not convert or is not a choice): argparse reads those, and says
    what is wrong. Without argparse a start skips its import and sixty ``add_argument`` calls
    (about 17 M instructions, 4% of ``serve`` to its first answer)."""
    settings = {s.flag: s for s in declared() if s.scope in ("both", "serve")}
    out: dict[str, Any] = {"command": "serve", **dict.fromkeys(_SERVE_ONLY.values()),
                           **{s.name: None for s in settings.values()}}
    i = 0
    while i < len(argv):
        flag, eq, value = argv[i].partition("=")
        i += 1
        s = settings.get(flag)
        if s is None and flag not in _SERVE_ONLY:
            return None
        if s is not None and s.type is bool:  # a switch (store_const): no value
            if eq:
                return None
            out[s.name] = True
            continue
        if not eq:
            if i == len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        if s is None:
            out[_SERVE_ONLY[flag]] = value
        elif getattr(s.type, "__origin__", None) is tuple:  # a list: the flag repeats
            out[s.name] = [*(out[s.name] or ()), value]
        else:
            try:
                typed = value if s.type is str else s.type(value)
            except ValueError:
                return None
            if s.choices and typed not in s.choices:
                return None
            out[s.name] = typed
    return SimpleNamespace(**out)


def flags_of(args: argparse.Namespace | SimpleNamespace) -> dict[str, Any]:
    """The declared settings given on the command line (those not given are None)."""
    return {s.name: getattr(args, s.name) for s in declared() if hasattr(args, s.name)}
