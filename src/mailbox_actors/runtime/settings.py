"""Node settings: every tunable of the runtime, validated once at start with a message naming it."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path

import msgspec

from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.platform.dns.resolver import DnsSettings
from mailbox_actors.platform.storage.limits import Durability, Limits

__all__ = ["DEFAULT_ID_SECRET", "SECRET_SETTINGS", "SMTP_TLS_MODES", "TRANSPORTS", "RuntimeSettings",
           "SettingsError"]

# Settings whose values an error message must never quote.
SECRET_SETTINGS = frozenset({"id_secret", "token", "operator_token", "postgres"})

# The namespace keys derive from this. Ids stay valid across restarts and between nodes of a cluster
# as long as the secret is the same; a deployment may set its own.
DEFAULT_ID_SECRET = "mailbox-actors-default-id-secret"


# CA-14: the node's mail transport (``none``: submitted mail stays queued) and SMTP's TLS modes.
TRANSPORTS = ("none", "smtp", "cloudflare")
SMTP_TLS_MODES = ("none", "starttls", "tls")


DEFAULT_MAX_ACTIVE_ACTORS = 10_000


class SettingsError(ValueError):
    """A setting is out of range; the message names it."""


class RuntimeSettings(msgspec.Struct, kw_only=True, frozen=True):
    data_dir: str
    node_name: str = "node-0"
    durability: str = Durability.NORMAL
    idle_ms: int = 10_000
    # A ceiling the node lowers to what the machine holds (OPS-4): silently from this default, with
    # a warning from a value an operator chose.
    max_active_actors: int = DEFAULT_MAX_ACTIVE_ACTORS
    max_queue: int = 1_000
    alarm_concurrency: int = 32
    # Worker threads that open an evicted actor's file ahead of its alarm and close it behind
    # (runtime/file_threads.py); 0: on the event loop, in the scheduler's order (TestRuntime's
    # default, so that alarms due at one fake instant run in one order every time: RT-12).
    file_threads: int = 4
    shutdown_grace_ms: int = 10_000
    # RT-16: a block_concurrency_while (and the start hook) that runs longer is given up and the
    # actor reset, as workerd does after 30 s.
    block_concurrency_timeout_ms: int = 30_000
    # RT-17: a handler step that holds the event loop longer is logged and counted.
    loop_block_warn_ms: int = 100
    id_secret: str = DEFAULT_ID_SECRET
    limits: Limits = Limits()
    inbound: InboundLimits = InboundLimits()  # caps of received mail (IN-1)
    # The cluster's shared control database and queues (None: events stay in memory, see
    # RecordingEventSink); every node of a cluster names the same two files.
    control_db: str | None = None
    queues_db: str | None = None
    # CL-7: a PostgreSQL DSN; then the control data and the queues live there, not in the files.
    postgres: str | None = None
    webhook_consumers: int = 8  # a tenant may have all but one in flight (node/settings.py)
    webhook_ca_file: str | None = None  # PEM CAs for https webhooks (None: the system's)
    # DomainMonitor (DM-1, DM-3): how DNS is asked, and the state machine's hysteresis and pace.
    dns: DnsSettings = DnsSettings()
    domain_fail_after: int = 3
    domain_check_pending_ms: int = 300_000
    domain_check_verified_ms: int = 86_400_000
    domain_pending_expiry_ms: int = 72 * 3_600_000
    # Outbound mail (CA-14). Credentials are named by file, never given as values, so they stay
    # out of flags, environment dumps and TOML files; node/mail.py reads them at start.
    transport: str = "none"
    smtp_host: str | None = None
    smtp_port: int | None = None  # None: 25, or 587 with starttls, 465 with tls
    smtp_tls: str = "none"
    smtp_username: str | None = None
    smtp_password_file: str | None = None
    smtp_timeout_s: float = 600.0  # the final reply after the body (RFC 5321 4.5.3.2)
    smtp_ca_file: str | None = None  # PEM CAs the relay's certificate is checked against
    cloudflare_url: str | None = None
    cloudflare_token_file: str | None = None
    # Carrier's per-recipient cap (CA-6): at most this many Emails per normalized recipient
    # address in this rolling window, per IdentityMailbox.
    recipient_cap: int = 50
    recipient_cap_window_ms: int = 86_400_000
    # With transport none, how often an identity's queued mail is looked at again (so a node
    # restarted with a transport sends it).
    mail_recheck_ms: int = 300_000
    # CA-16: an Email whose provider stays unreachable this long, with no dispatch, ends expired.
    unreachable_window_ms: int = 86_400_000

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                value = getattr(self, name)
                got = f"{len(value)} characters" if name in SECRET_SETTINGS else repr(value)
                raise SettingsError(f"setting {name!r} {what} (got {got})")

        need(bool(self.data_dir), "data_dir", "must be a directory path")
        need(self.durability in Durability.ALL, "durability", f"must be one of {Durability.ALL}")
        need(self.idle_ms >= 1, "idle_ms", "must be >= 1")
        need(self.max_active_actors >= 1, "max_active_actors", "must be >= 1")
        need(self.max_queue >= 1, "max_queue", "must be >= 1")
        need(1 <= self.alarm_concurrency <= 10_000, "alarm_concurrency", "must be in 1..10000")
        need(0 <= self.file_threads <= 64, "file_threads", "must be in 0..64")
        need(self.shutdown_grace_ms >= 0, "shutdown_grace_ms", "must be >= 0")
        need(self.block_concurrency_timeout_ms >= 1, "block_concurrency_timeout_ms",
             "must be >= 1")
        need(self.loop_block_warn_ms >= 1, "loop_block_warn_ms", "must be >= 1")
        need(len(self.id_secret) >= 8, "id_secret", "must be at least 8 characters")
        need((self.control_db is None) == (self.queues_db is None), "queues_db",
             "must be set together with control_db")
        need(self.postgres is None or bool(self.postgres.strip()), "postgres",
             "must be a PostgreSQL connection string (host=... dbname=... or postgresql://...)")
        need(1 <= self.webhook_consumers <= 64, "webhook_consumers", "must be in 1..64")
        dns = self.dns
        for ns in dns.nameservers:
            try:
                ipaddress.ip_address(ns)
            except ValueError:
                raise SettingsError(f"setting 'dns_nameservers' must list IP addresses "
                                    f"(got {ns!r})") from None
        if not 1 <= dns.port <= 65535:
            raise SettingsError(f"setting 'dns_port' must be 1..65535 (got {dns.port})")
        if not 1 <= dns.timeout_ms <= 60_000:
            raise SettingsError(f"setting 'dns_timeout_ms' must be 1..60000 (got {dns.timeout_ms})")
        if not 1 <= dns.attempts <= 10:
            raise SettingsError(f"setting 'dns_attempts' must be 1..10 (got {dns.attempts})")
        need(1 <= self.domain_fail_after <= 100, "domain_fail_after", "must be 1..100")
        need(self.domain_check_pending_ms >= 1_000, "domain_check_pending_ms", "must be >= 1000")
        need(self.domain_check_verified_ms >= 1_000, "domain_check_verified_ms",
             "must be >= 1000")
        need(self.domain_pending_expiry_ms >= 1_000, "domain_pending_expiry_ms",
             "must be >= 1000")
        self._check_transport(need)
        need(1 <= self.recipient_cap <= 1_000_000, "recipient_cap", "must be in 1..1000000")
        need(60_000 <= self.recipient_cap_window_ms <= 31 * 86_400_000,
             "recipient_cap_window_ms", "must be between one minute and 31 days")
        need(100 <= self.mail_recheck_ms <= 86_400_000, "mail_recheck_ms",
             "must be between 100 ms and a day")
        need(60_000 <= self.unreachable_window_ms <= 31 * 86_400_000, "unreachable_window_ms",
             "must be between one minute and 31 days")
        bad = self.inbound.check()
        if bad is not None:
            raise SettingsError(f"setting 'inbound.{bad}' must be >= 1")
        lim = self.limits
        for field in lim.__struct_fields__:
            if getattr(lim, field) < 1:
                raise SettingsError(f"setting 'limits.{field}' must be >= 1")

    def _check_transport(self, need: Callable[[bool, str, str], None]) -> None:
        need(self.transport in TRANSPORTS, "transport", "must be smtp, cloudflare or none")
        need(self.smtp_tls in SMTP_TLS_MODES, "smtp_tls", "must be none, starttls or tls")
        need(self.smtp_port is None or 1 <= self.smtp_port <= 65535, "smtp_port",
             "must be 1..65535")
        need(0 < self.smtp_timeout_s <= 86_400, "smtp_timeout_s", "must be > 0 and <= 86400")
        need(self.smtp_host is None or (bool(self.smtp_host) and not any(
            c.isspace() or c in "/@" for c in self.smtp_host)), "smtp_host",
             "must be a host name or address")
        need(self.smtp_password_file is None or self.smtp_username is not None,
             "smtp_password_file", "needs smtp_username")
        if self.transport == "smtp":
            need(self.smtp_host is not None, "smtp_host", "must be set when transport is smtp")
            need(self.smtp_username is None or self.smtp_password_file is not None,
                 "smtp_username", "needs smtp_password_file (AUTH)")
        if self.transport == "cloudflare":
            url = self.cloudflare_url or ""
            scheme, _, rest = url.partition("://")
            need(scheme in ("http", "https") and bool(rest.split("/")[0]), "cloudflare_url",
                 "must be an http:// or https:// URL when transport is cloudflare")
            need(self.cloudflare_token_file is not None, "cloudflare_token_file",
                 "must be set when transport is cloudflare")

    @property
    def smtp_port_or_default(self) -> int:
        if self.smtp_port is not None:
            return self.smtp_port
        return {"starttls": 587, "tls": 465}.get(self.smtp_tls, 25)

    @property
    def path(self) -> Path:
        return Path(self.data_dir)
