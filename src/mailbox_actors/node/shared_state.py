"""Where a node keeps the cluster's shared state (Q-3, CL-7): the control database and the queues,
in the SQLite files every node of one machine shares, or with ``postgres`` set in one PostgreSQL
database (one pool for both, so the outbox's dispatch writes the event index and the webhook
messages in one transaction). A DSN that does not connect stops the node at start with a
``SettingsError`` naming the setting (exit 2), never its password."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mailbox_actors.runtime.settings import RuntimeSettings, SettingsError

if TYPE_CHECKING:
    from mailbox_actors.platform.clock import Clock
    from mailbox_actors.platform.control.database import ControlDb
    from mailbox_actors.platform.ids import Ids
    from mailbox_actors.platform.queues import QueueService

__all__ = ["ON_POSTGRES", "control_on_postgres", "open_shared_state", "postgres_from",
           "refuse_if_on_postgres", "shared_state"]

# Beside where DATA/control.sqlite would be: says the cluster in DATA keeps its control data on
# PostgreSQL (where, never the password), so a command given DATA without the DSN refuses to
# make a control.sqlite nobody reads (``control_on_postgres``).
ON_POSTGRES = "control.postgres.json"


def shared_state(settings: RuntimeSettings, *, clock: Clock, ids: Ids, metrics: Any
                 ) -> tuple[ControlDb, QueueService] | None:
    """The control database and the queues the settings name (not opened), or None (embedded
    use: events stay in memory)."""
    if settings.postgres is not None:
        from mailbox_actors.platform.control.postgres import control_on
        from mailbox_actors.platform.postgres.database import PgDatabase
        from mailbox_actors.platform.queues.postgres import queues_on

        _mark(settings.control_db, settings.postgres)
        db = PgDatabase(settings.postgres, setting="postgres")
        return (control_on(db, clock=clock, ids=ids),
                queues_on(db, clock=clock, ids=ids, metrics=metrics))
    if settings.control_db is None or settings.queues_db is None:
        return None
    _mark(settings.control_db, None)
    from mailbox_actors.platform.control.database import ControlDb
    from mailbox_actors.platform.queues import QueueService

    return (ControlDb(Path(settings.control_db), clock=clock, ids=ids),
            QueueService(Path(settings.queues_db), clock=clock, ids=ids, metrics=metrics))


async def open_shared_state(control_db: ControlDb, queues: QueueService) -> None:
    """Open both; an unreachable PostgreSQL is the ``postgres`` setting's fault (exit 2)."""
    try:
        await control_db.open()
        await queues.open()
    except Exception as e:
        if getattr(e, "setting", None) == "postgres":  # PgUnreachable, without importing psycopg
            raise SettingsError(str(getattr(e, "message", e))) from None
        raise


def _mark(control_db: str | None, dsn: str | None) -> None:
    """Write (``dsn`` set) or remove the ``ON_POSTGRES`` note beside ``control_db``'s place."""
    if control_db is None:
        return
    note = Path(control_db).with_name(ON_POSTGRES)
    try:
        if dsn is None:
            note.unlink(missing_ok=True)
            return
        import json

        from mailbox_actors.platform.postgres.dsn import redact

        staged = note.with_suffix(".tmp")
        staged.write_text(json.dumps({"postgres": redact(dsn)}) + "\n")
        staged.replace(note)
    except OSError:
        pass  # a read-only or missing directory: the commands then need the DSN said anyway


def control_on_postgres(data: str | Path) -> str | None:
    """Where (without the password) the cluster in ``data`` keeps its control data on PostgreSQL,
    or None when it keeps them in ``data``."""
    import json

    try:
        doc = json.loads((Path(data) / ON_POSTGRES).read_text())
    except (OSError, ValueError):
        return None
    where = doc.get("postgres") if isinstance(doc, dict) else None
    return str(where) if where else None


def refuse_if_on_postgres(data: str | Path) -> None:
    """Exit 2 (SettingsError) rather than make a DATA/control.sqlite nobody reads, when the
    cluster in ``data`` runs with ``--postgres`` and the command was given no DSN."""
    where = control_on_postgres(data)
    if where is not None:
        raise SettingsError(f"setting 'postgres': the cluster in {data} keeps its control data on "
                            f"PostgreSQL ({where}); give --postgres DSN or MAILBOX_ACTORS_POSTGRES "
                            "(the password from PGPASSFILE or ~/.pgpass)")


def postgres_from(given: str | None) -> str | None:
    """The DSN for a command that reads the control data, by the precedence ``serve`` uses: the
    flag ``given``, else ``MAILBOX_ACTORS_POSTGRES``, else the ``postgres`` key of the TOML file
    ``MAILBOX_ACTORS_CONFIG`` names (``--config FILE`` sets it for the command), else None."""
    if given:
        return given
    if os.environ.get("MAILBOX_ACTORS_POSTGRES"):
        return os.environ["MAILBOX_ACTORS_POSTGRES"]
    path = os.environ.get("MAILBOX_ACTORS_CONFIG")
    if not path:
        return None
    from mailbox_actors.node.config import read_config_file

    doc = read_config_file(path)
    value = doc.get("postgres")
    if value is not None and not isinstance(value, str):
        raise SettingsError(f"config file {path!r}: setting 'postgres' must be a connection "
                            "string")
    return value or None
