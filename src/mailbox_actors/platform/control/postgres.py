"""The control database on PostgreSQL (CL-7): ``control_on(db, clock=..., ids=...)`` is a
``ControlDb`` whose records live in ``db`` (a ``PgDatabase`` the queues may share), under the
``control`` component's schema. Needs the ``postgres`` extra."""

from __future__ import annotations

from mailbox_actors.platform.clock import Clock
from mailbox_actors.platform.control.database import ControlDb
from mailbox_actors.platform.control.postgres_schema import CONTROL
from mailbox_actors.platform.ids import Ids
from mailbox_actors.platform.postgres.database import PgDatabase
from mailbox_actors.platform.postgres.store import PgStore

__all__ = ["control_on"]


def control_on(db: PgDatabase, *, clock: Clock, ids: Ids) -> ControlDb:
    return ControlDb(PgStore(db, CONTROL, what="control database"), clock=clock, ids=ids)
