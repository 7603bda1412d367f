"""The console's settings (UI-4): where it listens, which cluster it shows, and whether it is in
dev mode. Dev mode shows mail content (bodies, subjects, addresses), so it is refused anywhere but
loopback; without it the console shows ids, states, counts and evidence only (CA-10).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from mailbox_actors.node.config import is_loopback
from mailbox_actors.runtime.settings import SettingsError

__all__ = ["ConsoleSettings", "is_loopback"]


class ConsoleSettings(msgspec.Struct, kw_only=True, frozen=True):
    """``data``: the cluster's data directory (its cluster.json, tokens and control database);
    ``dev``: show mail content, on loopback only; ``refresh_ms``: how often a page asks whether
    the event index moved."""

    data: str = "./data"
    host: str = "127.0.0.1"
    port: int = 8800
    dev: bool = False
    refresh_ms: int = 2_000

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"setting 'port' must be 0..65535 (got {self.port!r})")
        if not 250 <= self.refresh_ms <= 600_000:
            raise SettingsError(f"setting 'refresh_ms' must be 250..600000 (got {self.refresh_ms!r})")
        if self.dev and not is_loopback(self.host):
            raise SettingsError(
                f"setting 'host' must be a loopback address in dev mode, which shows mail content "
                f"(got {self.host!r}): bind 127.0.0.1, or leave out --dev")

    @property
    def data_path(self) -> Path:
        return Path(self.data)
