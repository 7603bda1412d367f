"""What a command that talks to a running cluster finds through ``--data``: the ``--data`` and
``--url`` arguments every such command takes, and the cluster's control database in DATA (where
tenants, identities and domains are looked up by name), or the cluster's PostgreSQL database when
it runs with ``--postgres`` (CL-7: ``--postgres DSN`` here too, or ``MAILBOX_ACTORS_POSTGRES``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mailbox_actors.platform.control.database import ControlDb

__all__ = ["add_postgres_argument", "add_target_arguments", "has_control_db", "open_control_db",
           "postgres_dsn"]


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default="./data",
                   help="the cluster's (or node's) data directory (default ./data)")
    p.add_argument("--url", help="a single node's URL when DATA has no cluster.json "
                   "(default http://127.0.0.1:8787)")
    add_postgres_argument(p)


def add_postgres_argument(p: argparse.ArgumentParser) -> None:
    from mailbox_actors.node.postgres_flag import add_postgres_arguments

    add_postgres_arguments(p, where="DATA/control.sqlite")


def postgres_dsn(given: str | None = None) -> str | None:
    """The DSN given by flag, variable or config file, else None (the SQLite file)."""
    from mailbox_actors.node.shared_state import postgres_from

    return postgres_from(given)


def has_control_db(data: str | Path, postgres: str | None = None) -> bool:
    """Whether there is a control database to look names up in (raises SettingsError when the
    cluster in ``data`` keeps it on PostgreSQL and no DSN was given)."""
    if postgres_dsn(postgres) is not None:
        return True
    _refuse_on_postgres(data)
    return (Path(data) / "control.sqlite").exists()


def _refuse_on_postgres(data: str | Path) -> None:
    from mailbox_actors.node.shared_state import refuse_if_on_postgres

    refuse_if_on_postgres(data)


def open_control_db(data: str | Path, postgres: str | None = None) -> ControlDb:
    """The control database of the cluster in ``data``, or in PostgreSQL (``postgres_dsn``)
    (``async with`` it); imported late, so a command that never needs it starts fast."""
    from mailbox_actors.platform.clock import SystemClock
    from mailbox_actors.platform.control.database import ControlDb
    from mailbox_actors.platform.ids import Ids
    from mailbox_actors.platform.rng import SystemRng

    clock = SystemClock()
    dsn = postgres_dsn(postgres)
    if dsn is not None:
        from mailbox_actors.platform.control.postgres import control_on
        from mailbox_actors.platform.postgres.database import PgDatabase, PgUnreachable
        from mailbox_actors.runtime.settings import SettingsError

        class _Setting(PgDatabase):
            """A DSN that does not connect is the setting's fault: exit 2 (``cli.main``)."""

            async def open(self) -> None:
                try:
                    await super().open()
                except PgUnreachable as e:
                    raise SettingsError(e.message) from None

        return control_on(_Setting(dsn, setting="postgres", min_size=1, max_size=2),
                          clock=clock, ids=Ids(clock, SystemRng()))
    _refuse_on_postgres(data)
    return ControlDb(Path(data) / "control.sqlite", clock=clock, ids=Ids(clock, SystemRng()))
