"""``mailbox-actors console``: the web console (UI-4) in a process of its own beside the cluster,
reading it over HTTP and from its control database as the other commands do. It is never part of
a node: a node's hot path imports none of it.

Exit status: 0 stopped, 1 no cluster or no token to show one with, 2 a refused setting.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mailbox_actors.console.settings import ConsoleSettings

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default="./data",
                   help="the cluster's (or node's) data directory (default ./data)")
    p.add_argument("--url", help="a single node's URL when DATA has no cluster.json "
                   "(default http://127.0.0.1:8787)")
    from mailbox_actors.node.postgres_flag import add_postgres_arguments

    add_postgres_arguments(p, where="DATA/control.sqlite")
    p.add_argument("--host", default="127.0.0.1", help="where the console listens "
                   "(default 127.0.0.1; dev mode refuses anything but loopback)")
    p.add_argument("--port", type=int, default=8800, help="its port (default 8800; 0: any free)")
    p.add_argument("--dev", action="store_true",
                   help="dev mode: show mail content (bodies, subjects, addresses); loopback only")
    p.add_argument("--refresh-ms", type=int, default=2000,
                   help="how often a page asks whether the event index moved (default 2000)")


def run(args: argparse.Namespace) -> int:
    from mailbox_actors.runtime.settings import SettingsError

    try:
        from mailbox_actors.console.settings import ConsoleSettings

        settings = ConsoleSettings(data=args.data, host=args.host, port=args.port, dev=args.dev,
                                   refresh_ms=args.refresh_ms)
        postgres = _postgres(args)
    except ImportError as e:
        print(f"mailbox-actors console: the console's libraries are not installed ({e.name}): "
              "pip install 'mailbox-actors[console]'", file=sys.stderr)
        return 2
    except SettingsError as e:
        print(f"mailbox-actors console: {e}", file=sys.stderr)
        return 2
    return serve(settings, url=args.url, postgres=postgres)


def _postgres(args: argparse.Namespace) -> str | None:
    from mailbox_actors.node.shared_state import postgres_from

    return postgres_from(args.postgres)


def serve(settings: ConsoleSettings, *, url: str | None, postgres: str | None = None) -> int:
    import uvicorn

    from mailbox_actors.console.app import create_app
    from mailbox_actors.console.cluster_view import ClusterView
    from mailbox_actors.console.session import Sessions
    from mailbox_actors.rpc.client import read_token

    data = Path(settings.data)
    if postgres is None and not (data / "control.sqlite").exists():
        print(f"mailbox-actors console: no cluster on {data} (no control.sqlite there): start one "
              f"with 'mailbox-actors cluster --data {data}'", file=sys.stderr)
        return 1
    try:
        cluster_token = read_token(data, "cluster")
        operator_token = read_token(data, "operator")
    except FileNotFoundError as e:
        print(f"mailbox-actors console: no token ({e.filename} does not exist): set "
              "MAILBOX_ACTORS_TOKEN and MAILBOX_ACTORS_OPERATOR_TOKEN, or start the cluster on "
              f"{data}", file=sys.stderr)
        return 1
    view = ClusterView.from_data_dir(data, url=url, cluster_token=cluster_token,
                                     operator_token=operator_token, postgres=postgres)
    app = create_app(settings, view, Sessions(operator_token))
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as e:
        print(f"mailbox-actors console: cannot listen on {settings.host}:{settings.port} "
              f"({e.strerror})", file=sys.stderr)
        return 2
    sock.listen(128)  # connections wait in the backlog from now on, until uvicorn accepts them
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    mode = "dev mode: mail content shown" if settings.dev else "content hidden"
    print(f"console: listening on http://{shown}:{port}/ ({mode}; "
          f"sign in with the operator token in {data / 'operator.token'})", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           lifespan="on", server_header=False))
    server.run(sockets=[sock])
    return 0
