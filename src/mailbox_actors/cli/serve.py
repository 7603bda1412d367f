"""``mailbox-actors serve`` (CL-1): one node process on the network until SIGTERM or Ctrl-C.

Prints where it listens, where its data is and where the tokens are, then serves. A stop drains
requests in flight, stops alarms and closes every file (RT-11). Inside a cluster the supervisor
starts it with ``--peers`` so it can forward requests for ids another node owns.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec

from mailbox_actors.cli.lifeline import stop_with_supervisor
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer, loop_backend_options
from mailbox_actors.node.app import NodeApp
from mailbox_actors.node.config import NodeConfig, ensure_id_secret, ensure_tokens, load_config
from mailbox_actors.node.forwarding import Peers
from mailbox_actors.node.node import Node
from mailbox_actors.objects import DEFAULT_OBJECTS
from mailbox_actors.platform.descriptors import raise_nofile_limit
from mailbox_actors.platform.locks import DataDirLocked
from mailbox_actors.platform.logging import configure_logging
from mailbox_actors.platform.sqlite_files import DamagedFile
from mailbox_actors.rpc.openapi import openapi_json
from mailbox_actors.runtime.settings import SettingsError
from mailbox_actors.wire.errors import MailboxActorsError

__all__ = ["add_arguments", "add_config_arguments", "package_version", "run", "serve"]

FLAGS = ("data", "host", "port", "node_name", "token", "token_file", "operator_token",
         "operator_token_file", "durability", "idle_ms", "max_active_actors", "max_queue",
         "max_body_bytes", "read_timeout_s", "shutdown_grace_ms", "log_format", "log_level",
         "control_db", "queues_db",
         "webhook_consumers", "webhook_ca_file", "dns_nameservers", "dns_port", "dns_timeout_ms",
         "dns_attempts", "dns_authoritative", "domain_fail_after", "domain_check_pending_ms",
         "domain_check_verified_ms", "domain_pending_expiry_ms",
         "transport", "smtp_host", "smtp_port", "smtp_tls", "smtp_username", "smtp_password_file",
         "smtp_timeout_s", "smtp_ca_file", "cloudflare_url", "cloudflare_token_file", "recipient_cap",
         "recipient_cap_window_ms", "mail_recheck_ms", "smtp_listen_port", "inbound_max_message_bytes")


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # 35 ms of imports: not at start

    try:
        return version("mailbox-actors")
    except PackageNotFoundError:  # running from a source tree without installing
        return "0.0.0"


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="data directory (default ./data)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8787)")
    p.add_argument("--config", help="TOML file of settings (flags and MAILBOX_ACTORS_* win)")
    p.add_argument("--token", help="cluster token (default: generated into DATA/cluster.token)")
    p.add_argument("--token-file", dest="token_file",
                   help="read the cluster token from this file (mode 0600 advised)")
    p.add_argument("--operator-token", dest="operator_token",
                   help="operator token (default: generated into DATA/operator.token)")
    p.add_argument("--operator-token-file", dest="operator_token_file",
                   help="read the operator token from this file")
    p.add_argument("--durability", choices=("normal", "full"),
                   help="normal survives a process crash; full also power loss, with an fsync "
                        "per commit (default normal)")
    p.add_argument("--idle-ms", dest="idle_ms", type=int,
                   help="close an actor's file after it has been idle this long (default 10000)")
    p.add_argument("--max-active-actors", dest="max_active_actors", type=int,
                   help="open actors at most; lowered to what the descriptor limit allows "
                        "(default 10000)")
    p.add_argument("--max-queue", dest="max_queue", type=int,
                   help="requests waiting per actor before it answers overloaded (default 1000)")
    p.add_argument("--max-body-bytes", dest="max_body_bytes", type=int,
                   help="largest request body accepted, in bytes (default 1048576)")
    p.add_argument("--read-timeout-s", dest="read_timeout_s", type=float,
                   help="a request must arrive whole within this (default 10)")
    p.add_argument("--shutdown-grace-ms", dest="shutdown_grace_ms", type=int,
                   help="on stop, how long requests in flight may finish (default 10000)")
    p.add_argument("--log-format", dest="log_format", choices=("auto", "json", "console"),
                   help="log lines as JSON or readable text; auto: text on a terminal "
                        "(default auto)")
    p.add_argument("--log-level", dest="log_level",
                   choices=("debug", "info", "warning", "error"),
                   help="the lowest level logged (default info)")
    p.add_argument("--control-db", dest="control_db",
                   help="the cluster's control database (default DATA/control.sqlite)")
    p.add_argument("--queues-db", dest="queues_db",
                   help="the cluster's queue database (default DATA/queues.sqlite)")
    p.add_argument("--webhook-consumers", dest="webhook_consumers", type=int,
                   help="webhook deliveries in flight per node (default 4)")
    p.add_argument("--webhook-ca-file", dest="webhook_ca_file",
                   help="PEM file of the CAs https webhook endpoints are checked against "
                        "(default: the system's)")
    p.add_argument("--dns-nameservers", dest="dns_nameservers", metavar="IP[,IP...]",
                   help="nameservers DomainMonitor asks (default: the system's resolv.conf)")
    p.add_argument("--dns-port", dest="dns_port", type=int,
                   help="their port (default 53)")
    p.add_argument("--dns-timeout-ms", dest="dns_timeout_ms", type=int,
                   help="per-attempt DNS timeout (default 2000)")
    p.add_argument("--dns-attempts", dest="dns_attempts", type=int,
                   help="DNS attempts before a check reads the record as unknown (default 2)")
    p.add_argument("--dns-authoritative", dest="dns_authoritative", action="store_const",
                   const=True, help="ask each zone's own nameservers, not a caching resolver")
    p.add_argument("--domain-fail-after", dest="domain_fail_after", type=int,
                   help="failed checks in a row before a verified domain is failing (default 3)")
    p.add_argument("--domain-check-pending-ms", dest="domain_check_pending_ms", type=int,
                   help="check interval while pending, failing or in doubt (default 300000)")
    p.add_argument("--domain-check-verified-ms", dest="domain_check_verified_ms", type=int,
                   help="check interval once verified (default 86400000)")
    p.add_argument("--domain-pending-expiry-ms", dest="domain_pending_expiry_ms", type=int,
                   help="a domain still pending this long after init is failed (default 72 h)")
    mail = p.add_argument_group("outbound mail (CA-14)")
    mail.add_argument("--transport", choices=("smtp", "cloudflare", "none"),
                      help="how submitted mail leaves (default none: it stays queued)")
    mail.add_argument("--smtp-host", dest="smtp_host", help="SMTP relay host (transport smtp)")
    mail.add_argument("--smtp-port", dest="smtp_port", type=int,
                      help="SMTP relay port (default 25; 587 with starttls, 465 with tls)")
    mail.add_argument("--smtp-tls", dest="smtp_tls", choices=("none", "starttls", "tls"),
                      help="none, starttls (upgrade, refused if not offered) or tls from the "
                           "first byte (default none)")
    mail.add_argument("--smtp-username", dest="smtp_username",
                      help="SMTP AUTH login (needs --smtp-password-file)")
    mail.add_argument("--smtp-password-file", dest="smtp_password_file",
                      help="file holding the SMTP AUTH password (read at start)")
    mail.add_argument("--smtp-timeout-s", dest="smtp_timeout_s", type=float,
                      help="how long to wait for the reply after the body before the outcome "
                           "is unknown (default 600, RFC 5321 4.5.3.2)")
    mail.add_argument("--smtp-ca-file", dest="smtp_ca_file",
                      help="PEM file of the CAs the relay's certificate is checked against "
                           "(default: the system's)")
    mail.add_argument("--cloudflare-url", dest="cloudflare_url",
                      help="Email Service-style send endpoint, http(s)://... (transport "
                           "cloudflare)")
    mail.add_argument("--cloudflare-token-file", dest="cloudflare_token_file",
                      help="file holding the bearer token for --cloudflare-url (read at start)")
    mail.add_argument("--recipient-cap", dest="recipient_cap", type=int,
                      help="at most this many emails per recipient address in the window, per "
                           "identity; more are refused (default 50)")
    mail.add_argument("--recipient-cap-window-ms", dest="recipient_cap_window_ms", type=int,
                      help="the cap's rolling window (default 86400000, a day)")
    mail.add_argument("--mail-recheck-ms", dest="mail_recheck_ms", type=int,
                      help="with transport none, how often queued mail is looked at again, so "
                           "a node restarted with a transport sends it (default 300000)")
    inbound = p.add_argument_group("inbound mail (IN-5)")
    inbound.add_argument("--smtp-listen-port", dest="smtp_listen_port", type=int,
                         help="listen for SMTP on --host at this port (0: any free port); "
                              "in a cluster node i listens on this + i (default: no SMTP door)")
    inbound.add_argument("--inbound-max-message-bytes", dest="inbound_max_message_bytes",
                         type=int, help="a received message over this is refused "
                                        "(552 at the door, limit_exceeded by ingest; "
                                        "default 26214400)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    p.add_argument("--node-name", dest="node_name", help="this node's name (default node-0)")
    p.add_argument("--peers", help=argparse.SUPPRESS)  # name=url,... set by the cluster supervisor


def flags_of(args: argparse.Namespace, names: tuple[str, ...] = FLAGS) -> dict[str, Any]:
    return {k: getattr(args, k, None) for k in names}


def run(args: argparse.Namespace) -> int:
    stop_with_supervisor()  # a node of a cluster never outlives its supervisor (OPS-1)
    raise_nofile_limit()  # OPS-4: all the descriptors we may have; Node bounds its actors by it
    try:
        cfg = load_config(flags_of(args), os.environ, args.config)
        peers = parse_peers(args.peers) if args.peers else []
    except SettingsError as e:
        print(f"mailbox-actors serve: {e}", file=sys.stderr)
        return 2
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
    data = Path(os.path.abspath(cfg.data))  # noqa: ASYNC240 - once, before serving
    secret, _ = ensure_id_secret(cfg, data)  # before the tokens: a first start has neither
    cfg = msgspec.structs.replace(cfg, id_secret=secret)
    tokens = ensure_tokens(cfg, data)
    configure_logging(json=None if cfg.log_format == "auto" else cfg.log_format == "json",
                      level=cfg.log_level)
    names = [n for n, _ in peers]
    if names and cfg.node_name not in names:
        raise SettingsError(f"setting 'node_name' {cfg.node_name!r} is not in the peer list")
    pool = HttpPool()
    urls = [u for _, u in peers]

    async def forward(owner: int, method: str, path: str, headers: Any, body: bytes,
                      timeout_s: float) -> tuple[int, bytes]:
        return await pool.request(urls[owner], method, path, headers, body, timeout_s=timeout_s)

    # The cluster is the node's from its construction: its alarms' calls to actors on other
    # nodes, and the app's requests, go to their owners from the first one.
    cluster = Peers(names, names.index(cfg.node_name), forward,
                    cluster_token=tokens.cluster) if names else None
    node = Node(cfg.runtime_settings(str(data)), peers=cluster,
                progress=lambda text: print(f"{cfg.node_name}: {text}", file=sys.stderr))
    app = NodeApp(node, cluster_token=tokens.cluster, operator_token=tokens.operator,
                  openapi=lambda: openapi_json(DEFAULT_OBJECTS, package_version()))
    async with node:
        server = RpcHttpServer(app, max_body_bytes=cfg.max_body_bytes,
                               request_timeout_s=cfg.read_timeout_s)
        try:
            port = await server.start(cfg.host, cfg.port)
        except OSError as e:  # a port in use is a setting to change, not a crash to restart
            raise SettingsError(f"cannot listen on {cfg.host}:{cfg.port}: "
                                f"{e.strerror or e}") from None
        door = None
        if cfg.smtp_listen_port is not None:
            from mailbox_actors.node.smtp_door import SmtpDoor  # aiosmtpd: only with a door

            door = SmtpDoor(app, tokens.cluster, max_message_bytes=cfg.inbound_max_message_bytes)
            try:
                smtp_port = await door.start(cfg.host, cfg.smtp_listen_port)
            except OSError as e:
                await server.stop()
                raise SettingsError(f"cannot listen for SMTP on {cfg.host}:"
                                    f"{cfg.smtp_listen_port}: {e.strerror or e}") from None
            print(f"{cfg.node_name}: SMTP door on {cfg.host}:{smtp_port}", flush=True)
        print(f"{cfg.node_name}: listening on http://{cfg.host}:{port} (pid {os.getpid()})\n"
              f"{cfg.node_name}: data in {data}\n"
              f"{cfg.node_name}: cluster token in {tokens.cluster_file or '(given)'}, "
              f"operator token in {tokens.operator_file or '(given)'}", flush=True)
        try:
            async with anyio.create_task_group() as tg:
                async def stop_on_failure() -> None:
                    await node.failed.wait()
                    print(f"{cfg.node_name}: {node.failure}; stopping so it can be restarted",
                          file=sys.stderr, flush=True)
                    tg.cancel_scope.cancel()

                tg.start_soon(stop_on_failure)
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        break
                tg.cancel_scope.cancel()
        finally:
            print(f"{cfg.node_name}: stopping (draining requests in flight)", flush=True)
            if door is not None:
                await door.stop()
            await server.stop()
            await pool.aclose()
    print(f"{cfg.node_name}: stopped", flush=True)
    return 1 if node.failed.is_set() else 0
