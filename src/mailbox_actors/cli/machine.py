"""``mailbox-actors machine`` and ``mailbox-actors slots`` (CL-6 .. CL-17): many machines on one
PostgreSQL.

    mailbox-actors slots create  --postgres DSN --slots 64 --machines m1,m2,m3 \\
                                 --slot-failover local|shared --id-secret-file FILE
    mailbox-actors machine       --postgres DSN --machine m1 --volumes DIR --port 8787 \\
                                 --id-secret-file FILE --token-file F --operator-token-file F
    mailbox-actors slots status  --postgres DSN [--json]
    mailbox-actors slots drain   --postgres DSN --machine m1 [--undo]

A machine started with another S, another id secret, or a DSN it cannot reach exits 2 naming the
setting; a second process of one machine (or on one machine's volume) is refused naming the pid.
The single-machine ``cluster`` command is unchanged. See docs/many-machines.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "add_slots_arguments", "run", "run_slots"]

_DSN_ENV = "MAILBOX_ACTORS_POSTGRES"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mailbox_actors.cli.serve_args import add_config_arguments

    # --postgres among them (the cluster's one database); the machine's own (--machine,
    # --volumes, --url, --slots, --lease-ttl-s, --lease-renew-s, --id-secret-file) are declared
    # with the others in node/settings.py, so they are variables and TOML keys too.
    add_config_arguments(p, command="machine")


def add_slots_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("create", "status", "drain"),
                   help="create: the cluster's slots, once; status: machines, slots, epochs and "
                        "lease ages from PostgreSQL; drain: hand a machine's slots over")
    from mailbox_actors.node.postgres_flag import add_postgres_arguments

    add_postgres_arguments(p, where="refused: the slots live there")
    p.add_argument("--slots", type=int, default=64, help="create: slots, fixed (default 64)")
    p.add_argument("--machines", help="create: the machines' names, comma-separated; slot k's "
                   "home is the (k mod n)-th")
    p.add_argument("--slot-failover", dest="slot_failover", default="local",
                   choices=("local", "shared"),
                   help="create: local (a dead machine's slots wait for it) or shared (another "
                        "machine takes them after the TTL; volumes every machine attaches)")
    p.add_argument("--id-secret-file", dest="id_secret_file",
                   help="create: file holding the id secret (or MAILBOX_ACTORS_ID_SECRET)")
    p.add_argument("--machine", help="drain: the machine to drain")
    p.add_argument("--undo", action="store_true", help="drain: end the drain")
    p.add_argument("--json", action="store_true", help="status: as JSON")


def _fail(command: str, text: str) -> int:
    print(f"mailbox-actors {command}: {text}", file=sys.stderr)
    return 2


def _dsn(args: argparse.Namespace) -> str:
    from mailbox_actors.node.shared_state import postgres_from
    from mailbox_actors.runtime.settings import SettingsError

    dsn = postgres_from(args.postgres)
    if not dsn:
        raise SettingsError("setting 'postgres' is required (--postgres DSN or "
                            f"{_DSN_ENV})")
    return str(dsn)


def _id_secret(secret_file: str | None, given: str | None) -> str:
    from mailbox_actors.runtime.settings import SettingsError

    if secret_file:
        try:
            secret = Path(secret_file).read_text().strip()
        except OSError as e:
            raise SettingsError(f"setting 'id_secret_file': {secret_file} cannot be "
                                f"read ({e.strerror})") from None
    else:
        secret = given or os.environ.get("MAILBOX_ACTORS_ID_SECRET", "")
    if len(secret) < 16:
        raise SettingsError("setting 'id_secret' is required, at least 16 characters, the same "
                            "on every machine (--id-secret-file or MAILBOX_ACTORS_ID_SECRET)")
    return secret


# ---- machine ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    import anyio

    from mailbox_actors.cli.lifeline import stop_with_supervisor
    from mailbox_actors.cli.serve_args import flags_of
    from mailbox_actors.http.server import loop_backend_options
    from mailbox_actors.node.config import load_config
    from mailbox_actors.platform.descriptors import raise_nofile_limit
    from mailbox_actors.platform.storage.wal_index import empty_indexes_at_close
    from mailbox_actors.runtime.settings import SettingsError

    stop_with_supervisor()  # as serve: a supervised machine never outlives its supervisor (OPS-1)
    raise_nofile_limit()
    empty_indexes_at_close()  # as serve: every connection to an actor file here is counted
    try:
        cfg = load_config(flags_of(args), os.environ, args.config)
        if not cfg.postgres:
            raise SettingsError("setting 'postgres' is required on many machines (--postgres "
                                f"DSN or {_DSN_ENV})")
        dsn = cfg.postgres
        for name in ("machine", "volumes"):
            if not getattr(cfg, name):
                raise SettingsError(f"setting {name!r} is required (--{name} or "
                                    f"MAILBOX_ACTORS_{name.upper()})")
        secret = _id_secret(cfg.id_secret_file, cfg.id_secret)
        ttl, renew = cfg.lease_ttl_s, cfg.lease_renew_s
        if not 0 < renew < ttl:
            raise SettingsError(f"setting 'lease_renew_s' must be > 0 and below the TTL "
                                f"(got {renew} with a TTL of {ttl})")
        if cfg.slots is not None and not 1 <= cfg.slots <= 4096:
            raise SettingsError(f"setting 'slots' must be 1..4096 (got {cfg.slots})")
        return int(anyio.run(_serve, args, cfg, dsn, secret, ttl, renew, backend="asyncio",
                             backend_options=loop_backend_options()))
    except SettingsError as e:
        return _fail("machine", str(e))


async def _serve(args: argparse.Namespace, cfg: Any, dsn: str, secret: str, ttl: float,
                 renew: float) -> int:
    import signal

    import anyio

    # Signals are received from before the start to after the drain: one that comes meanwhile
    # (a second SIGTERM, as a dying supervisor's lifeline sends) waits in the receiver rather
    # than ending the process half-way with Python's default action.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        return await _serve_until(signals, cfg, dsn, secret, ttl, renew)


async def _serve_until(signals: Any, cfg: Any, dsn: str, secret: str, ttl: float,
                       renew: float) -> int:
    import anyio
    import msgspec

    from mailbox_actors.cli.serve import package_version
    from mailbox_actors.cluster.lease_table import LeaseTable
    from mailbox_actors.cluster.machine import FENCE_OFF_ENV, Machine, MachineSettings
    from mailbox_actors.cluster.machine_app import MachineApp
    from mailbox_actors.http.server import RpcHttpServer
    from mailbox_actors.node.config import ensure_tokens
    from mailbox_actors.node.user_objects import served_objects
    from mailbox_actors.platform.logging import configure_logging
    from mailbox_actors.rpc.openapi import openapi_json
    from mailbox_actors.runtime.settings import SettingsError

    name = cfg.machine
    volumes = Path(os.path.abspath(cfg.volumes))  # noqa: ASYNC240 - once, at start
    cfg = msgspec.structs.replace(cfg, id_secret=secret, node_name=name)
    tokens = ensure_tokens(cfg, volumes)
    configure_logging(json=None if cfg.log_format == "auto" else cfg.log_format == "json",
                      level=cfg.log_level)
    fence = os.environ.get(FENCE_OFF_ENV) != "1"
    if not fence:
        print(f"{name}: WARNING {FENCE_OFF_ENV}=1: the fence is OFF (tests only)",
              file=sys.stderr, flush=True)
    app: list[Any] = []

    async def handler(method: str, path: str, headers: Any, body: bytes) -> Any:
        return await app[0](method, path, headers, body)

    server = RpcHttpServer(handler, max_body_bytes=cfg.max_body_bytes,
                           request_timeout_s=cfg.read_timeout_s)
    try:
        port = await server.start(cfg.host, cfg.port)
    except OSError as e:
        raise SettingsError(f"cannot listen on {cfg.host}:{cfg.port}: {e.strerror or e}"
                            ) from None
    host = cfg.host if cfg.host not in ("0.0.0.0", "::") else socket.gethostname()
    url = cfg.url or f"http://{host}:{port}"
    settings = MachineSettings(name=name, volumes=volumes, url=url.rstrip("/"), ttl_s=ttl,
                               renew_s=renew, slots=cfg.slots, fence=fence)
    objects = served_objects(cfg.objects)  # the platform's and the user's (UI-7)
    machine = Machine(settings, cfg.runtime_settings(str(volumes)), LeaseTable(dsn),
                      cluster_token=tokens.cluster, operator_token=tokens.operator,
                      objects=objects, openapi=lambda: openapi_json(objects, package_version()))
    app.append(MachineApp(machine))
    try:
        await machine.start()
    except BaseException:
        await server.stop()
        with anyio.CancelScope(shield=True):
            await machine.table.close()
        raise
    door = None
    if cfg.smtp_listen_port is not None:
        from mailbox_actors.cluster.machine_door import machine_door  # aiosmtpd: only with a door

        door = machine_door(app[0], tokens.cluster,
                            max_message_bytes=cfg.inbound_max_message_bytes)
        try:
            smtp_port = await door.start(cfg.host, cfg.smtp_listen_port)
        except OSError as e:
            await machine.stop()
            await server.stop()
            raise SettingsError(f"cannot listen for SMTP on {cfg.host}:"
                                f"{cfg.smtp_listen_port}: {e.strerror or e}") from None
        print(f"{name}: SMTP door on {cfg.host}:{smtp_port}", flush=True)
    print(f"{name}: listening on {url} (pid {os.getpid()}), volumes in {volumes}, "
          f"slot_failover {machine.policy}, {machine.slot_count} slots, holding "
          f"{sorted(machine.hosts)}", flush=True)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(machine.run)
            async for _ in signals:
                break
            tg.cancel_scope.cancel()
    finally:
        print(f"{name}: stopping (draining its slots)", flush=True)
        if door is not None:
            await door.stop()
        await machine.stop()
        await server.stop()
    print(f"{name}: stopped", flush=True)
    return 0


# ---- slots -----------------------------------------------------------------------------------


def run_slots(args: argparse.Namespace) -> int:
    import anyio

    from mailbox_actors.runtime.settings import SettingsError

    try:
        return int(anyio.run(_slots, args))
    except SettingsError as e:
        return _fail("slots", str(e))


async def _slots(args: argparse.Namespace) -> int:
    import json

    from mailbox_actors.cluster.lease_table import LeaseTable, TableUnreachable
    from mailbox_actors.cluster.slots import MAX_SLOTS, secret_fingerprint
    from mailbox_actors.runtime.settings import SettingsError

    table = LeaseTable(_dsn(args))
    try:
        if args.action == "create":
            if not 1 <= args.slots <= MAX_SLOTS:
                raise SettingsError(f"setting 'slots' must be 1..{MAX_SLOTS} (got {args.slots})")
            machines = [m.strip() for m in (args.machines or "").split(",") if m.strip()]
            if not machines or len(set(machines)) != len(machines):
                raise SettingsError("setting 'machines' must name one or more distinct "
                                    "machines, comma-separated")
            fp = secret_fingerprint(_id_secret(args.id_secret_file, None))
            made = await table.create(args.slots, fp, machines, args.slot_failover)
            print(("created" if made else "already created") + f": {args.slots} slots over "
                  f"{', '.join(machines)}, slot_failover {args.slot_failover}")
            return 0
        if args.action == "drain":
            if not args.machine:
                raise SettingsError("setting 'machine' is required to drain")
            if not await table.set_draining(args.machine, not args.undo):
                raise SettingsError(f"setting 'machine': no machine {args.machine!r}")
            print(f"{args.machine}: " + ("drain ended" if args.undo else
                  "draining (its slots are handed over at its next renewal)"))
            return 0
        row = await table.cluster()
        if row is None:
            raise SettingsError("setting 'postgres': the database holds no cluster")
        machines_rows = await table.machines()
        slots = await table.slot_map()
        if args.json:
            print(json.dumps({
                "slots": row.slots, "slot_failover": row.slot_failover,
                "machines": [{"name": m.name, "url": m.url, "host": m.host, "pid": m.pid,
                              "seen_age_s": m.seen_age_s, "draining": m.draining}
                             for m in machines_rows],
                "map": [{"slot": s.slot, "home": s.home, "holder": s.holder, "epoch": s.epoch,
                         "live": s.live, "renewed_age_s": s.renewed_age_s} for s in slots]},
                indent=2))
            return 0
        print(f"{row.slots} slots, slot_failover {row.slot_failover}")
        print(f"{'MACHINE':<12} {'PID':>7} {'SEEN':>8} {'SLOTS':>5}  URL")
        for m in machines_rows:
            held = sum(1 for s in slots if s.holder == m.name and s.live)
            seen = "-" if m.seen_age_s is None else f"{m.seen_age_s:.1f}s"
            print(f"{m.name:<12} {m.pid:>7} {seen:>8} {held:>5}  {m.url or '-'}"
                  + ("  (draining)" if m.draining else ""))
        print(f"{'SLOT':>4} {'HOME':<12} {'HOLDER':<12} {'EPOCH':>6} {'LEASE AGE':>9}")
        for s in slots:
            age = "-" if s.renewed_age_s is None or not s.live else f"{s.renewed_age_s:.1f}s"
            print(f"{s.slot:>4} {s.home:<12} {(s.holder if s.live else None) or '-':<12} "
                  f"{s.epoch:>6} {age:>9}")
        return 0
    except TableUnreachable as e:
        raise SettingsError(f"setting 'postgres': cannot reach PostgreSQL ({e})") from None
    finally:
        await table.close()
