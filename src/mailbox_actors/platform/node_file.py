"""Where a running node listens, recorded in its data directory (``DATA/node.json``).

``serve`` writes it once it listens (name, URL, pid) and removes it when it stops; every command
given ``--data`` for a single node (``status``, ``call``, ``actors``...) finds the node there, on
whatever port it was started with, instead of assuming the default one. A file left by a node
that died is recognised by its pid no longer running and is ignored.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from mailbox_actors.platform.processes import pid_alive

__all__ = ["NODE_FILE", "read_node_file", "remove_node_file", "url_for", "write_node_file"]

NODE_FILE = "node.json"


def url_for(host: str, port: int) -> str:
    """The URL a local client reaches a node bound to ``host``:``port`` by (a wildcard bind is
    reached on loopback)."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def write_node_file(data_dir: Path, name: str, url: str, pid: int | None = None) -> None:
    """Record (replacing whole) that node ``name`` of ``data_dir`` listens at ``url``."""

    doc = {"name": name, "url": url, "pid": os.getpid() if pid is None else pid}
    staged = data_dir / (NODE_FILE + ".tmp")
    staged.write_bytes(msgspec.json.encode(doc))
    os.replace(staged, data_dir / NODE_FILE)


def remove_node_file(data_dir: Path, pid: int | None = None) -> None:
    """Remove the record if it is this process's (a newer node's record stays)."""
    found = _read(data_dir)
    if found is not None and found.get("pid") == (os.getpid() if pid is None else pid):
        (data_dir / NODE_FILE).unlink(missing_ok=True)


def read_node_file(data_dir: Path) -> tuple[str, str] | None:
    """(name, URL) of the node running on ``data_dir``, or None when no live node recorded one."""
    doc = _read(data_dir)
    url, pid = (None, None) if doc is None else (doc.get("url"), doc.get("pid"))
    if not isinstance(url, str) or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if not pid_alive(pid):
        return None  # left by a node that died
    return str(doc.get("name") or "node-0") if doc else "node-0", url


def _read(data_dir: Path) -> dict[str, object] | None:
    try:
        doc = msgspec.json.decode((data_dir / NODE_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
