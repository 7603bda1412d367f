"""``mailbox-actors serve`` (CL-1): one node process on the network until SIGTERM or Ctrl-C.

Prints where it listens, where its data is and where the tokens are, then serves. A stop drains
requests in flight, stops alarms and closes every file (RT-11). Inside a cluster the supervisor
starts it with ``--peers`` so it can forward requests for ids another node owns.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from mailbox_actors.cli.lifeline import stop_with_supervisor
from mailbox_actors.cli.serve_args import add_arguments, add_config_arguments, flags_of
from mailbox_actors.node.config import NodeConfig, ensure_id_secret, ensure_tokens, load_config
from mailbox_actors.platform.descriptors import raise_nofile_limit
from mailbox_actors.platform.locks import DataDirLocked
from mailbox_actors.platform.logging import configure_logging
from mailbox_actors.platform.sqlite_files import DamagedFile
from mailbox_actors.runtime.settings import SettingsError
from mailbox_actors.wire.errors import MailboxActorsError

if TYPE_CHECKING:
    import argparse

    from mailbox_actors.http.client import HttpPool

__all__ = ["add_arguments", "add_config_arguments", "package_version", "run", "serve"]


def package_version() -> str:
    from mailbox_actors import __version__  # not importlib.metadata: 35 ms of imports

    return __version__


def run(args: argparse.Namespace | SimpleNamespace) -> int:
    stop_with_supervisor()  # a node of a cluster never outlives its supervisor (OPS-1)
    raise_nofile_limit()  # OPS-4: all the descriptors we may have; Node bounds its actors by it
    # Every connection to an actor file in this process is the node's own (counted): a sleeping
    # actor's -shm may be emptied at its last close (ADR 0012; off in an embedding program).
    from mailbox_actors.platform.storage.wal_index import empty_indexes_at_close

    empty_indexes_at_close()
    try:
        cfg = load_config(flags_of(args), os.environ, args.config)
        peers = parse_peers(args.peers) if args.peers else []
    except SettingsError as e:
        print(f"mailbox-actors serve: {e}", file=sys.stderr)
        return 2
    from mailbox_actors.http.server import loop_backend_options

    try:
        return anyio.run(serve, cfg, peers, backend="asyncio",
                         backend_options=loop_backend_options())
    except DataDirLocked as e:
        print(f"mailbox-actors serve: {e}", file=sys.stderr)
        return 1
    except DamagedFile as e:  # OPS-2: an operator must act; a restart would only fail again
        print(f"mailbox-actors serve: {e.message}", file=sys.stderr)
        return 2
    except MailboxActorsError as e:  # a file that cannot be opened, and the like: said plainly
        sqlite = e.details.get("sqlite") if isinstance(e.details, dict) else None
        print(f"mailbox-actors serve: {e.message}" + (f" ({sqlite})" if sqlite else ""),
              file=sys.stderr)
        return 1
    except SettingsError as e:
        print(f"mailbox-actors serve: {e}", file=sys.stderr)
        return 2


def parse_peers(text: str) -> list[tuple[str, str]]:
    out = []
    for item in text.split(","):
        name, sep, url = item.partition("=")
        if not sep or not name or not url.startswith("http://"):
            raise SettingsError(f"setting 'peers' must be name=http://host:port,... (got {item!r})")
        out.append((name, url.rstrip("/")))
    return out


async def serve(cfg: NodeConfig, peers: list[tuple[str, str]]) -> int:
    """Run one node until SIGTERM or SIGINT (exit status 0), or until a background loop of the
    node fails (1: a cluster supervisor restarts it)."""
    from mailbox_actors.http.server import RpcHttpServer
    from mailbox_actors.node.app import NodeApp
    from mailbox_actors.node.forwarding import Peers
    from mailbox_actors.node.node import Node
    from mailbox_actors.node.user_objects import served_entries
    from mailbox_actors.platform.node_file import remove_node_file, url_for, write_node_file

    data = Path(os.path.abspath(cfg.data))  # noqa: ASYNC240 - once, before serving
    secret, _ = ensure_id_secret(cfg, data)  # before the tokens: a first start has neither
    cfg = msgspec.structs.replace(cfg, id_secret=secret)
    tokens = ensure_tokens(cfg, data)
    configure_logging(json=None if cfg.log_format == "auto" else cfg.log_format == "json",
                      level=cfg.log_level)
    names = [n for n, _ in peers]
    if names and cfg.node_name not in names:
        raise SettingsError(f"setting 'node_name' {cfg.node_name!r} is not in the peer list")
    pool: HttpPool | None = None
    cluster = None
    if names:  # a node of a cluster: the HTTP client for its peers
        from mailbox_actors.http.client import HttpPool

        pool = peer_pool = HttpPool()
        urls = [u for _, u in peers]

        async def forward(owner: int, method: str, path: str, headers: Any, body: bytes,
                          timeout_s: float) -> tuple[int, bytes]:
            return await peer_pool.request(urls[owner], method, path, headers, body,
                                      timeout_s=timeout_s)

        # The cluster is the node's from its construction: its alarms' calls to actors on other
        # nodes, and the app's requests, go to their owners from the first one.
        cluster = Peers(names, names.index(cfg.node_name), forward,
                        cluster_token=tokens.cluster)
    # The platform's objects (each imported at its namespace's first use) and the user's (UI-7).
    objects = served_entries(cfg.objects)
    # Its control database and queues open once it answered (requests that need them wait).
    node = Node(cfg.runtime_settings(str(data)), peers=cluster, objects=objects,
                progress=lambda text: print(f"{cfg.node_name}: {text}", file=sys.stderr),
                answer_first=True)  # the alarm index is checked after the first answer

    def openapi() -> bytes:  # at its first request: it describes every object, so imports them
        from mailbox_actors.rpc.openapi import openapi_json

        return openapi_json(node.object_classes(), package_version())

    app = NodeApp(node, cluster_token=tokens.cluster, operator_token=tokens.operator,
                  openapi=openapi,
                  # Inspection shows content only in dev mode, which listens on loopback (UI-4).
                  content_allowed=cfg.dev)
    # Signals are received from before the start to after the drain: one that comes meanwhile
    # (a second SIGTERM, as a dying supervisor's lifeline sends, or an early one) waits in the
    # receiver rather than ending the process half-way with Python's default action.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with node:
            # The door first: a node answers its HTTP port (its health, for the supervisor) only
            # once every port it serves takes connections, so a node said to be back takes mail.
            door = None
            if cfg.smtp_listen_port is not None:
                from mailbox_actors.node.smtp_door import SmtpDoor  # aiosmtpd: only with a door

                await node.shared_state_opened()  # the door resolves recipients there
                door = SmtpDoor.for_node(app, node, tokens.cluster,
                                         max_message_bytes=cfg.inbound_max_message_bytes,
                                         catch_all=cfg.dev, journal_address=cfg.journal_address)
                try:
                    smtp_port = await door.start(cfg.host, cfg.smtp_listen_port)
                except OSError as e:
                    raise SettingsError(f"cannot listen for SMTP on {cfg.host}:"
                                        f"{cfg.smtp_listen_port}: {e.strerror or e}") from None
                print(f"{cfg.node_name}: SMTP door on {cfg.host}:{smtp_port}", flush=True)
            server = RpcHttpServer(app, max_body_bytes=cfg.max_body_bytes,
                                   request_timeout_s=cfg.read_timeout_s)
            try:
                port = await server.start(cfg.host, cfg.port)
            except OSError as e:  # a port in use is a setting to change, not a crash to restart
                if door is not None:
                    await door.stop()
                raise SettingsError(f"cannot listen on {cfg.host}:{cfg.port}: "
                                    f"{e.strerror or e}") from None
            # Where it listens, for every command given --data (on any port, not only the default):
            # recorded before it says so, so whoever reads that line finds the file.
            write_node_file(data, cfg.node_name, url_for(cfg.host, port))
            gc.freeze()  # what the start made (cli.main disabled the collector for it) ...
            gc.enable()  # ... is never walked again; what serving makes is collected as usual
            print(f"{cfg.node_name}: listening on http://{cfg.host}:{port} (pid {os.getpid()})\n"
                  f"{cfg.node_name}: data in {data}\n"
                  f"{cfg.node_name}: cluster token in {tokens.cluster_file or '(given)'}, "
                  f"operator token in {tokens.operator_file or '(given)'}", flush=True)
            try:
                async with anyio.create_task_group() as tg:
                    async def stop_on_failure() -> None:
                        await node.failed.wait()
                        if node.shared_state_error is None:  # else said by run() as at a start
                            print(f"{cfg.node_name}: {node.failure}; stopping so it can be "
                                  "restarted", file=sys.stderr, flush=True)
                        tg.cancel_scope.cancel()

                    tg.start_soon(stop_on_failure)
                    async for _ in signals:
                        break
                    tg.cancel_scope.cancel()
            finally:
                remove_node_file(data)
                print(f"{cfg.node_name}: stopping (draining requests in flight)", flush=True)
                if door is not None:
                    await door.stop()
                await server.stop()
                if pool is not None:
                    await pool.aclose()
    print(f"{cfg.node_name}: stopped", flush=True)
    if node.shared_state_error is not None:  # a damaged control file: as at a start (exit 2)
        raise node.shared_state_error
    return 1 if node.failed.is_set() else 0
