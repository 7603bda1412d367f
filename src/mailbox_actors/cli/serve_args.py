"""The flags of ``mailbox-actors serve`` (CL-1), which ``cluster`` shares: argparse only.

Apart from ``cli/serve.py`` so that a command that only passes these flags on (the cluster's
supervisor, which starts ``serve`` processes) does not import the node, the HTTP server and the
platform objects that serving needs (a third of the instructions of building its parser).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["FLAGS", "add_arguments", "add_config_arguments", "flags_of"]

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
