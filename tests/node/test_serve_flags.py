"""``serve``'s command line read without argparse (``cli.serve_args.read_serve_flags``; PERF,
issue 28 item 3: ``serve`` to its first answer): every flag written out in full is read as
argparse reads it, and anything else is left to argparse, which reads it or says what is wrong
(CL-4: the flags come from the settings' one declaration)."""

from __future__ import annotations

import pytest

from mailbox_actors.cli import build_parser
from mailbox_actors.cli.serve_args import read_serve_flags
from mailbox_actors.node.settings import declared

_SERVE = [s for s in declared() if s.scope in ("both", "serve")]


def _argparse(argv: list[str]) -> dict[str, object]:
    return vars(build_parser("serve", alone=True).parse_args(["serve", *argv]))


def _every_flag(equals: bool) -> list[str]:
    """Every flag of serve once with a value of its type (lists twice, switches bare)."""
    argv = ["--config", "c.toml", "--peers", "a=http://x:1"]
    for s in _SERVE:
        if s.type is bool:
            argv.append(s.flag)
            continue
        if getattr(s.type, "__origin__", None) is tuple:
            values = ["m.one:A", "m.two:B"]
        elif s.choices:
            values = [s.choices[-1]]
        else:
            values = [{int: "7", float: "1.5", str: "x y"}[s.type]]
        for v in values:
            argv += [f"{s.flag}={v}"] if equals else [s.flag, v]
    return argv


@pytest.mark.parametrize("argv", [
    [], ["--data", "d", "--port", "0"], ["--port=0", "--data=d", "--dev", "--port", "9"],
    _every_flag(False), _every_flag(True), ["--data", ""], ["--data="]])
def test_flags_in_full_are_read_as_argparse_reads_them(argv: list[str]) -> None:
    """CL-4: what serve reads without argparse equals argparse's reading, setting for setting
    (unset ones None, lists appended, switches True, numbers converted, the last value kept)."""
    fast = read_serve_flags(argv)
    assert fast is not None
    assert vars(fast) == _argparse(argv)


@pytest.mark.parametrize("argv", [
    ["--help"], ["-h"], ["--dat", "d"], ["--data"], ["--port", "x"], ["--port", "-1"],
    ["--log-level", "loud"], ["--dev=1"], ["--data", "d", "extra"], ["--", "--data", "d"],
    ["--nonsense", "1"]])
def test_anything_else_is_left_to_argparse(argv: list[str]) -> None:
    """CL-4: a flag shortened, unknown or missing its value, a value that does not convert or is
    no choice, help: not read here, so argparse reads it (a shortened flag) or refuses it with
    its own message."""
    assert read_serve_flags(argv) is None


def test_argparse_still_reads_a_shortened_flag() -> None:
    """What is left to argparse still works: ``--dat`` is ``--data`` there."""
    assert _argparse(["--dat", "d"])["data"] == "d"
