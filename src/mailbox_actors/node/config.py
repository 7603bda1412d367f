"""Node and cluster configuration (CL-4): flags, then ``MAILBOX_ACTORS_*`` variables, then a TOML file.

Everything is validated once, at start, and a bad value is reported with the setting's name and
where it came from. Tokens are generated into the data directory on first start (mode 0600) unless
given. Nothing here starts anything.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.node.mail import check_transport_files
from mailbox_actors.node.settings import ENV_PREFIX, NodeSettings
from mailbox_actors.platform.dns.resolver import DnsSettings
from mailbox_actors.runtime.settings import (
    DEFAULT_ID_SECRET,
    SECRET_SETTINGS,
    RuntimeSettings,
    SettingsError,
)

__all__ = ["ENV_PREFIX", "ID_SECRET_FILE", "OBJECT_SPEC", "NodeConfig", "Tokens",
           "ensure_id_secret", "ensure_tokens", "is_loopback", "load_config",
           "read_config_file"]

ID_SECRET_FILE = "id.secret"
# UI-7: one entry of ``objects`` (node.user_objects imports it).
OBJECT_SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
                         r"(\.[A-Za-z_][A-Za-z0-9_]*)*")


class NodeConfig(NodeSettings, kw_only=True, forbid_unknown_fields=True):
    """Every setting of ``serve`` and ``cluster`` (declared in ``node/settings.py``), validated."""

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                value = getattr(self, name)
                got = f"{len(value)} characters" if name in SECRET_SETTINGS else repr(value)
                raise SettingsError(f"setting {name!r} {what} (got {got})")

        for name in self.__struct_fields__:
            value = getattr(self, name)
            # A NUL cannot travel in a path or an environment variable (TOML can hold one).
            need(not isinstance(value, str) or "\0" not in value, name,
                 "must not contain a NUL character")

        need(1 <= self.port <= 65535 or self.port == 0, "port", "must be 0..65535")
        need(1 <= self.nodes <= 64, "nodes", "must be 1..64")
        need(self.log_format in ("auto", "json", "console"), "log_format",
             "must be auto, json or console")
        need(self.log_level in ("debug", "info", "warning", "error"), "log_level",
             "must be debug, info, warning or error")
        need(self.max_body_bytes >= 1024, "max_body_bytes", "must be >= 1024")
        need(self.smtp_listen_port is None or 0 <= self.smtp_listen_port <= 65535,
             "smtp_listen_port", "must be 0..65535")
        need(self.read_timeout_s > 0, "read_timeout_s", "must be > 0")
        need(bool(self.host), "host", "must not be empty")
        need(1 <= self.webhook_consumers <= 64, "webhook_consumers", "must be 1..64")
        need(1 <= self.health_timeout_s <= 3600, "health_timeout_s", "must be 1..3600 seconds")
        for spec in self.objects:  # imported at start (node.user_objects), checked here first
            need(bool(OBJECT_SPEC.fullmatch(spec)), "objects",
                 "takes package.module:Class entries")
        if self.webhook_ca_file is not None:
            import ssl  # only then: 6 ms of a start otherwise

            try:
                ssl.create_default_context(cafile=self.webhook_ca_file)
            except (OSError, ssl.SSLError) as e:
                raise SettingsError(f"setting 'webhook_ca_file' names no readable PEM file of CA "
                                    f"certificates (got {self.webhook_ca_file!r}: {e})") from None
        need(not self.dev or is_loopback(self.host), "host",
             "must be a loopback address in dev mode (its SMTP door takes every recipient of a "
             "configured domain)")
        if self.transport == "capture":
            need(self.dev, "transport", "capture needs dev mode (--dev)")
            need(bool(self.smtp_listen_port), "transport",
                 "capture hands mail to this node's SMTP door: set smtp_listen_port (not 0)")
            need(self.smtp_host is None, "smtp_host",
                 "must not be set with transport capture (mail goes to the node's own door)")
        settings = self.runtime_settings()  # the node's own checks, so every entry point refuses
        check_transport_files(settings)  # credentials readable: refused before anything serves

    def runtime_settings(self, data_dir: str | None = None) -> RuntimeSettings:
        """The runtime's settings: every one of the same name is taken as it is (declared once,
        in ``node/settings.py``); only those the runtime holds in another shape are built here."""
        data = data_dir or self.data
        fields: dict[str, Any] = {name: getattr(self, name) for name in _SHARED_WITH_RUNTIME}
        fields.update(
            data_dir=data,
            id_secret=DEFAULT_ID_SECRET if self.id_secret is None else self.id_secret,
            control_db=self.control_db or str(Path(data) / "control.sqlite"),
            queues_db=self.queues_db or str(Path(data) / "queues.sqlite"),
            dns=DnsSettings(
                nameservers=tuple(n.strip() for n in self.dns_nameservers.split(",") if n.strip()),
                port=self.dns_port, timeout_ms=self.dns_timeout_ms, attempts=self.dns_attempts,
                authoritative=self.dns_authoritative),
            inbound=InboundLimits(max_message_bytes=self.inbound_max_message_bytes))
        if "postgres" in fields:
            fields["postgres"] = self.postgres or None
        if self.transport == "capture":  # UI-6: SMTP to this node's own door, on loopback
            fields.update(transport="smtp", smtp_host="127.0.0.1", smtp_port=self.smtp_listen_port,
                          smtp_tls="none")
        return RuntimeSettings(**fields)


# The settings the node and the runtime both have, by name: passed on as they are.
_SHARED_WITH_RUNTIME = tuple(name for name in NodeSettings.__struct_fields__
                             if name in RuntimeSettings.__struct_fields__)


def load_config(flags: Mapping[str, Any], env: Mapping[str, str] | None = None,
                toml_file: str | None = None) -> NodeConfig:
    """Merge the three sources (flags win, then environment, then the file) and validate."""
    env = os.environ if env is None else env
    fields = set(NodeConfig.__struct_fields__)
    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    path = toml_file or env.get(ENV_PREFIX + "CONFIG")
    if path:
        for k, v in read_config_file(path).items():
            name = k.replace("-", "_")
            if name not in fields:
                raise SettingsError(f"config file {path!r}: unknown setting {k!r}")
            merged[name], source[name] = v, f"config file {path}"
    for name in fields:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            value: Any = raw
            if name == "objects":  # a list in a variable: comma-separated
                value = [part.strip() for part in raw.split(",") if part.strip()]
            merged[name], source[name] = value, f"environment variable {ENV_PREFIX}{name.upper()}"
    for name, v in flags.items():
        if v is not None:
            if name not in fields:
                raise SettingsError(f"unknown setting {name!r}")
            merged[name], source[name] = v, f"flag --{name.replace('_', '-')}"
    try:
        return msgspec.convert(merged, NodeConfig, strict=False)
    except msgspec.ValidationError as e:
        text = str(e)
        for name, where in source.items():
            if f"`$.{name}`" in text:
                raise SettingsError(f"setting {name!r} from {where}: {text.split(' - at')[0]}"
                                    ) from None
        raise SettingsError(str(e)) from None
    except SettingsError as e:
        for name, where in source.items():
            if f"'{name}'" in str(e):
                raise SettingsError(f"{e} [from {where}]") from None
        raise


def read_config_file(path: str) -> dict[str, Any]:
    """The TOML file of settings at ``path`` (SettingsError when unreadable or not TOML)."""
    import tomllib  # only with a file: a start without one does not import the parser

    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise SettingsError(f"config file {path!r} cannot be read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"config file {path!r} is not valid TOML: {e}") from None


def is_loopback(host: str) -> bool:
    """``host`` names only this machine: ``localhost`` or an address in 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Tokens(msgspec.Struct, frozen=True):
    cluster: str
    operator: str
    cluster_file: str | None
    operator_file: str | None


def _read_or_create(path: Path) -> str:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        token = path.read_text().strip()
        if len(token) < 16:
            raise SettingsError(f"token file {path} holds fewer than 16 characters") from None
        return token
    import secrets  # a first start only

    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def ensure_tokens(cfg: NodeConfig, data_dir: Path) -> Tokens:
    """The cluster and operator tokens: given (flag, variable or file), else generated into the
    data directory on first start with mode 0600. They must differ."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def pick(value: str | None, file: str | None, default_name: str) -> tuple[str, str | None]:
        if value:
            return value, None
        path = Path(file) if file else data_dir / default_name
        if file and not path.exists():
            raise SettingsError(f"token file {path} does not exist")
        return _read_or_create(path), str(path)

    cluster, cluster_file = pick(cfg.token, cfg.token_file, "cluster.token")
    operator, operator_file = pick(cfg.operator_token, cfg.operator_token_file, "operator.token")
    if len(cluster) < 16 or len(operator) < 16:
        raise SettingsError("tokens must be at least 16 characters")
    # A plain comparison: both are the node's own settings, no caller's guess (the app compares
    # what callers send in constant time); hmac would load OpenSSL's digests before serving.
    if cluster == operator:
        raise SettingsError("the cluster token and the operator token must differ")
    return Tokens(cluster, operator, cluster_file, operator_file)


def ensure_id_secret(cfg: NodeConfig, data_dir: Path) -> tuple[str, str | None]:
    """The secret object ids are derived with (OPS-8), and the file it is in: the one given
    (flag, variable or TOML file), else DATA/id.secret, generated on first start with mode 0600.
    A data directory that was started before this file existed (its tokens are there) gets the old
    built-in secret written into it, so every id it has stays the same; that is logged as a warning,
    since anyone who reads the source can mint its ids."""
    if cfg.id_secret is not None:
        return cfg.id_secret, None
    path = data_dir / ID_SECRET_FILE
    if path.exists():
        secret = path.read_text().strip()
        if len(secret) < 16:
            raise SettingsError(f"id secret file {path} holds fewer than 16 characters")
        return secret, str(path)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    legacy = (data_dir / "cluster.token").exists()
    import secrets  # a first start only

    secret = DEFAULT_ID_SECRET if legacy else secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process of this start won the race: use its secret
        return ensure_id_secret(cfg, data_dir)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    if legacy:
        from mailbox_actors.platform.logging import get_logger

        get_logger("mailbox_actors.config").warning(
            "id_secret_builtin_kept", path=str(path),
            advice="ids of this data directory are derived with the built-in secret; a new data "
                   "directory gets a generated one")
    return secret, str(path)
