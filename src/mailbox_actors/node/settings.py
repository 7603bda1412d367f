"""The settings of ``serve`` and ``cluster``, declared once (CL-4): each one's type, default and
one-line description. The command-line flags, the ``MAILBOX_ACTORS_*`` variables, the TOML keys,
``--help`` and the settings reference page are all generated from this declaration; ``node/config``
validates the values; ``node/postgres_flag`` gives the commands that read the control data the
``postgres`` setting's flag (its description is read from there). Only msgspec and the standard
library here: the cluster's supervisor and the light commands build their parsers from it without
importing the node.
"""

# No ``from __future__ import annotations`` here: the settings' annotations are evaluated once,
# from this module's compiled code, when the class is made. As strings, every reader of them
# (``declared``, msgspec's conversion, ``msgspec.structs.fields``) had each of the sixty compiled
# from source again at every start (a tenth of ``serve``'s instructions to its first answer).

import functools
from typing import Annotated, Any, Literal

import msgspec

from mailbox_actors.node import postgres_flag

__all__ = ["ENV_PREFIX", "NodeSettings", "Scope", "SettingInfo", "declared"]

ENV_PREFIX = "MAILBOX_ACTORS_"

# Which command takes a setting as a flag: both, ``serve`` alone, ``cluster`` alone, ``machine``
# alone (it takes the "both" ones too), or neither (the environment and the TOML file only).
Scope = Literal["both", "serve", "cluster", "machine", "file"]


def _d(description: str, *, scope: Scope = "both", choices: tuple[str, ...] = (),
       group: str = "", metavar: str = "") -> msgspec.Meta:
    return msgspec.Meta(description=description, extra={
        "scope": scope, "choices": choices, "group": group, "metavar": metavar})


_MAIL = "outbound mail (CA-14)"
_INBOUND = "inbound mail (IN-5)"
_MACHINES = "many machines (CL-6..CL-17)"


class NodeSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Every setting of ``serve`` and ``cluster``; the defaults are what ``make run`` uses."""

    data: Annotated[str, _d("data directory")] = "./data"
    host: Annotated[str, _d("address to listen on")] = "127.0.0.1"
    port: Annotated[int, _d("port to listen on (a cluster: node i on this + i)")] = 8787
    nodes: Annotated[int, _d("number of node processes", scope="cluster")] = 3
    node_name: Annotated[str, _d("this node's name", scope="serve")] = "node-0"
    token: Annotated[str | None, _d(
        "cluster token (default: generated into DATA/cluster.token)")] = None
    token_file: Annotated[str | None, _d(
        "read the cluster token from this file (mode 0600 advised)")] = None
    operator_token: Annotated[str | None, _d(
        "operator token (default: generated into DATA/operator.token)")] = None
    operator_token_file: Annotated[str | None, _d(
        "read the operator token from this file")] = None
    durability: Annotated[str, _d(
        "normal survives a process crash; full also power loss, with an fsync per commit",
        choices=("normal", "full"))] = "normal"
    idle_ms: Annotated[int, _d(
        "close an actor's file after it has been idle this long")] = 10_000
    # A ceiling: the node lowers it at start to a quarter of memory / 512 KB and to a third of the
    # descriptors it may use (OPS-4; the storage guide's "How many open actors").
    max_active_actors: Annotated[int, _d(
        "open actors at most; lowered to what memory and the descriptor limit allow")] = 10_000
    max_queue: Annotated[int, _d(
        "requests waiting per actor before it answers overloaded")] = 1_000
    max_body_bytes: Annotated[int, _d("largest request body accepted, in bytes")] = 1 << 20
    read_timeout_s: Annotated[float, _d("a request must arrive whole within this")] = 10.0
    shutdown_grace_ms: Annotated[int, _d(
        "on stop, how long requests in flight may finish")] = 10_000
    block_concurrency_timeout_ms: Annotated[int, _d(
        "the longest block_concurrency_while may hold an actor before it is reset (RT-16)",
        scope="file")] = 30_000
    loop_block_warn_ms: Annotated[int, _d(
        "log a warning when the event loop is blocked this long (RT-17)", scope="file")] = 100
    id_secret: Annotated[str | None, _d(
        "the secret object ids are derived with (default: generated into DATA/id.secret)",
        scope="file")] = None
    log_format: Annotated[str, _d(
        "log lines as JSON or readable text; auto: text on a terminal",
        choices=("auto", "json", "console"))] = "auto"
    log_level: Annotated[str, _d(
        "the lowest level logged", choices=("debug", "info", "warning", "error"))] = "info"
    control_db: Annotated[str | None, _d(
        "the cluster's control database (default DATA/control.sqlite)")] = None
    queues_db: Annotated[str | None, _d(
        "the cluster's queue database (default DATA/queues.sqlite)")] = None
    postgres: Annotated[str | None, _d(postgres_flag.DESCRIPTION,
                                       metavar=postgres_flag.METAVAR)] = None
    webhook_consumers: Annotated[int, _d("webhook deliveries in flight per node")] = 8
    webhook_ca_file: Annotated[str | None, _d(
        "PEM file of the CAs https webhook endpoints are checked against "
        "(default: the system's)")] = None
    health_timeout_s: Annotated[float, _d(
        "restart a node that has not answered /healthz for this long", scope="cluster")] = 10.0
    dns_nameservers: Annotated[str, _d(
        "comma-separated nameservers DomainMonitor asks (empty: the system's resolv.conf)",
        metavar="IP[,IP...]")] = ""
    dns_port: Annotated[int, _d("the nameservers' port")] = 53
    dns_timeout_ms: Annotated[int, _d("per-attempt DNS timeout")] = 2_000
    dns_attempts: Annotated[int, _d(
        "DNS attempts before a check reads the record as unknown")] = 2
    dns_authoritative: Annotated[bool, _d(
        "ask each zone's own nameservers, not a caching resolver")] = False
    domain_fail_after: Annotated[int, _d(
        "failed checks in a row before a verified domain is failing")] = 3
    domain_check_pending_ms: Annotated[int, _d(
        "check interval while pending, failing or in doubt")] = 300_000
    domain_check_verified_ms: Annotated[int, _d("check interval once verified")] = 86_400_000
    domain_pending_expiry_ms: Annotated[int, _d(
        "a domain still pending this long after init is failed")] = 72 * 3_600_000
    transport: Annotated[str, _d(
        "how submitted mail leaves (none: it stays queued; capture, in dev mode: to this node's "
        "own SMTP door)", choices=("smtp", "cloudflare", "capture", "none"), group=_MAIL)] = "none"
    smtp_host: Annotated[str | None, _d("SMTP relay host (transport smtp)", group=_MAIL)] = None
    smtp_port: Annotated[int | None, _d(
        "SMTP relay port (default 25; 587 with starttls, 465 with tls)", group=_MAIL)] = None
    smtp_tls: Annotated[str, _d(
        "none, starttls (upgrade, refused if not offered) or tls from the first byte",
        choices=("none", "starttls", "tls"), group=_MAIL)] = "none"
    smtp_username: Annotated[str | None, _d(
        "SMTP AUTH login (needs --smtp-password-file)", group=_MAIL)] = None
    smtp_password_file: Annotated[str | None, _d(
        "file holding the SMTP AUTH password (read at start)", group=_MAIL)] = None
    smtp_timeout_s: Annotated[float, _d(
        "how long to wait for the reply after the body before the outcome is unknown "
        "(RFC 5321 4.5.3.2)", group=_MAIL)] = 600.0
    smtp_ca_file: Annotated[str | None, _d(
        "PEM file of the CAs the relay's certificate is checked against (default: the system's)",
        group=_MAIL)] = None
    cloudflare_url: Annotated[str | None, _d(
        "Email Service-style send endpoint, http(s)://... (transport cloudflare)",
        group=_MAIL)] = None
    cloudflare_token_file: Annotated[str | None, _d(
        "file holding the bearer token for --cloudflare-url (read at start)", group=_MAIL)] = None
    recipient_cap: Annotated[int, _d(
        "at most this many emails per recipient address in the window, per identity (CA-6)",
        group=_MAIL)] = 50
    recipient_cap_window_ms: Annotated[int, _d("the recipient cap's rolling window",
                                               group=_MAIL)] = 86_400_000
    mail_recheck_ms: Annotated[int, _d(
        "with transport none, how often queued mail is looked at again, so a node restarted "
        "with a transport sends it", group=_MAIL)] = 300_000
    unreachable_window_ms: Annotated[int, _d(
        "an email whose provider stays unreachable (connection refused, name or TLS failure, a "
        "drop before any recipient was accepted) this long ends expired (CA-16)",
        group=_MAIL)] = 86_400_000
    smtp_listen_port: Annotated[int | None, _d(
        "listen for SMTP on --host at this port (0: any free port); in a cluster node i listens "
        "on this + i (default: no SMTP door)", group=_INBOUND)] = None
    journal_address: Annotated[str | None, _d(
        "the address a provider that rewrites Message-ID sends its journal copies to: the SMTP "
        "door learns each Email's final Message-ID from them (CA-17)", group=_INBOUND)] = None
    inbound_max_message_bytes: Annotated[int, _d(
        "a received message over this is refused (552 at the door, limit_exceeded by ingest)",
        group=_INBOUND)] = 25 << 20
    dev: Annotated[bool, _d(
        "dev mode, loopback only (UI-6): the SMTP door takes any recipient of a configured domain "
        "into the tenant's catch-all identity; transport capture is allowed")] = False
    objects: Annotated[tuple[str, ...], _d(
        "serve your own actor class too, package.module:Class, e.g. counter:Counter (UI-7; "
        "repeatable; the working directory is importable; TOML: a list; the variable: "
        "comma-separated)", metavar="MODULE:CLASS")] = ()
    # Many machines (CL-6..CL-17): the settings of ``mailbox-actors machine``.
    machine: Annotated[str | None, _d(
        "this machine's name, one of those the cluster was created with (required)",
        scope="machine", group=_MACHINES)] = None
    volumes: Annotated[str | None, _d(
        "directory of the slot volumes (slot-<k>); under slot_failover=shared the same storage "
        "on every machine (required)", scope="machine", group=_MACHINES)] = None
    url: Annotated[str | None, _d(
        "where other machines and clients reach this one (default http://HOST:PORT)",
        scope="machine", group=_MACHINES)] = None
    slots: Annotated[int | None, _d(
        "refuse to start unless the cluster has this many slots", scope="machine",
        group=_MACHINES)] = None
    lease_ttl_s: Annotated[float, _d(
        "slot lease TTL, judged by PostgreSQL's clock (CL-9)", scope="machine",
        group=_MACHINES)] = 10.0
    lease_renew_s: Annotated[float, _d(
        "slot lease renewal period, below the TTL (CL-9)", scope="machine",
        group=_MACHINES)] = 3.0
    id_secret_file: Annotated[str | None, _d(
        "file holding the cluster's id secret (or MAILBOX_ACTORS_ID_SECRET)", scope="machine",
        group=_MACHINES)] = None


class SettingInfo(msgspec.Struct, frozen=True):
    """One declared setting, as the generated flags, variables and pages need it."""

    name: str
    type: Any  # the value's type, None removed: int, float, str or bool
    optional: bool
    default: Any
    description: str
    scope: Scope
    choices: tuple[str, ...]
    group: str
    metavar: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    def help(self) -> str:
        """The description and, where it has one, the default (``--help`` and the reference)."""
        if self.default in (None, "", ()) or "(default" in self.description:
            return self.description
        shown = ("on" if self.default else "off") if self.type is bool else self.default
        return f"{self.description} (default {shown})"


@functools.cache  # the annotations are evaluated once: a start reads them twice (flags, values)
def declared(cls: type[msgspec.Struct] = NodeSettings) -> tuple[SettingInfo, ...]:
    """Every setting of ``cls`` in declaration order, read from its annotations."""
    import types
    import typing

    # The class's own annotations are the evaluated objects (no postponed annotations here):
    # typing.get_type_hints would only walk them again through its evaluation (a tenth of this).
    # Its own only: a subclass's base fields would be missing, so none is allowed.
    if cls.__mro__[1] is not msgspec.Struct:
        raise TypeError(f"{cls.__name__}: declared() reads a direct msgspec.Struct's fields only")
    hints = cls.__annotations__
    out = []
    for field in msgspec.structs.fields(cls):
        hint = hints[field.name]
        base, *metas = typing.get_args(hint)
        meta = next(m for m in metas if isinstance(m, msgspec.Meta))
        args = typing.get_args(base)
        optional = isinstance(base, types.UnionType) and type(None) in args
        typ = next(a for a in args if a is not type(None)) if optional else base
        extra = meta.extra or {}
        out.append(SettingInfo(
            name=field.name, type=typ, optional=optional, default=field.default,
            description=meta.description or "", scope=extra["scope"], choices=extra["choices"],
            group=extra["group"], metavar=extra["metavar"]))
    return tuple(out)
