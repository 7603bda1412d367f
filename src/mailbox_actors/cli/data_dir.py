"""What a command that talks to a running cluster finds through ``--data``: the ``--data`` and
``--url`` arguments every such command takes, and the cluster's control database in DATA (where
tenants, identities and domains are looked up by name)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mailbox_actors.platform.control.database import ControlDb

__all__ = ["add_target_arguments", "open_control_db"]


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default="./data",
                   help="the cluster's (or node's) data directory (default ./data)")
    p.add_argument("--url", help="a single node's URL when DATA has no cluster.json "
                   "(default http://127.0.0.1:8787)")


def open_control_db(data: str | Path) -> ControlDb:
    """The control database of the cluster in ``data`` (``async with`` it); imported late, so a
    command that never needs it starts fast."""
    from mailbox_actors.platform.clock import SystemClock
    from mailbox_actors.platform.control.database import ControlDb
    from mailbox_actors.platform.ids import Ids
    from mailbox_actors.platform.rng import SystemRng

    clock = SystemClock()
    return ControlDb(Path(data) / "control.sqlite", clock=clock, ids=Ids(clock, SystemRng()))
