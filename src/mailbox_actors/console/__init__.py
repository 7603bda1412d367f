"""The web console (UI-4): server-rendered pages over a running cluster, in a process of its own
(``mailbox-actors console``). Needs the ``console`` extra (Starlette, Jinja2, uvicorn); nothing in
a node imports it.
"""

from __future__ import annotations

from mailbox_actors.console.settings import ConsoleSettings, is_loopback

__all__ = ["ConsoleSettings", "is_loopback"]
