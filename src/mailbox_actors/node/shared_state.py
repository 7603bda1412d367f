"""Where a node keeps the cluster's shared state (Q-3, CL-7): the control database and the queues,
in the SQLite files every node of one machine shares, or with ``postgres`` set in one PostgreSQL
database (one pool for both, so the outbox's dispatch writes the event index and the webhook
messages in one transaction). A DSN that does not connect stops the node at start with a
``SettingsError`` naming the setting (exit 2), never its password."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mailbox_actors.runtime.settings import RuntimeSettings, SettingsError

if TYPE_CHECKING:
    from mailbox_actors.platform.clock import Clock
    from mailbox_actors.platform.control.database import ControlDb
    from mailbox_actors.platform.ids import Ids
    from mailbox_actors.platform.queues import QueueService

__all__ = ["open_shared_state", "shared_state"]


def shared_state(settings: RuntimeSettings, *, clock: Clock, ids: Ids, metrics: Any
                 ) -> tuple[ControlDb, QueueService] | None:
    """The control database and the queues the settings name (not opened), or None (embedded
    use: events stay in memory)."""
    if settings.postgres is not None:
        from mailbox_actors.platform.control.postgres import control_on
        from mailbox_actors.platform.postgres.database import PgDatabase
        from mailbox_actors.platform.queues.postgres import queues_on

        db = PgDatabase(settings.postgres, setting="postgres")
        return (control_on(db, clock=clock, ids=ids),
                queues_on(db, clock=clock, ids=ids, metrics=metrics))
    if settings.control_db is None or settings.queues_db is None:
        return None
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
