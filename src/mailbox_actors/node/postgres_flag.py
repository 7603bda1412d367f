"""The ``postgres`` setting's flag for the commands that read the cluster's control data (CL-7):
``--postgres DSN`` and ``--config FILE``, described by the same text the setting's declaration in
``node/settings.py`` carries (it reads ``DESCRIPTION`` and ``METAVAR`` from here).

Apart from the declaration so that ``status``, ``id`` and ``call`` build their parsers without
evaluating sixty settings' declarations for one flag's help (argparse and the standard library
only).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

__all__ = ["DESCRIPTION", "METAVAR", "add_postgres_arguments"]

# The setting's name is ``postgres``: its flag --postgres, its variable MAILBOX_ACTORS_POSTGRES
# (tests/node/test_settings_declared.py holds the declaration to these).
DESCRIPTION = ("PostgreSQL DSN holding the control data and every queue (CL-7); without it the "
               "SQLite files in DATA")
METAVAR = "DSN"


def add_postgres_arguments(p: argparse.ArgumentParser, *, where: str) -> None:
    """``--postgres DSN`` and ``--config FILE`` for a command that reads the cluster's control data
    (the data commands, ``console``, ``slots``, ``migrate-to-postgres``): the flag's text is the
    ``postgres`` setting's own description and ``where`` says what the command does without one;
    node/shared_state's ``postgres_from`` reads the value, by serve's precedence."""
    import argparse  # here: serve reads the settings' declaration, which reads this module

    class ConfigFile(argparse.Action):
        """``--config FILE`` stands for ``MAILBOX_ACTORS_CONFIG=FILE`` in this command's process."""

        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                     values: object, option_string: str | None = None) -> None:
            os.environ["MAILBOX_ACTORS_CONFIG"] = str(values)
            setattr(namespace, self.dest, values)

    p.add_argument("--postgres", metavar=METAVAR,
                   help=f"{DESCRIPTION.split(';')[0]} (default $MAILBOX_ACTORS_POSTGRES, then the "
                   f"config file's postgres key; without any: {where})")
    p.add_argument("--config", metavar="FILE", action=ConfigFile,
                   help="the TOML file the cluster runs with: its postgres key is read "
                   "(default $MAILBOX_ACTORS_CONFIG)")
