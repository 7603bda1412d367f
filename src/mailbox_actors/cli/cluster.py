"""``mailbox-actors cluster`` (CL-2): a supervisor that runs N node processes and restarts the dead.

Node i listens on port P+i with its own data directory DIR/node-i and owns part of the id space by
rendezvous hashing over the node list. The supervisor writes DIR/cluster.json (names, URLs, pids,
data directories, restarts) for ``status`` and for clients, generates the tokens once, and on Ctrl-C
or SIGTERM (``mailbox-actors stop``) stops every node gracefully (SIGKILL only after the grace
period).

OPS-1: it holds an OS lock on DIR for its whole life, so a second supervisor on DIR is refused
(exit 2) before it touches anything; its nodes die with it (``cli/lifeline``); and a node that is
alive but stops answering ``/healthz`` (stopped, deadlocked) is killed and restarted like one that
exited.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec

from mailbox_actors.cli.lifeline import SUPERVISOR_ENV
from mailbox_actors.cli.serve_args import add_config_arguments, flags_of
from mailbox_actors.node.cluster_file import CLUSTER_FILE, read_cluster_file
from mailbox_actors.node.config import (
    ENV_PREFIX,
    NodeConfig,
    ensure_id_secret,
    ensure_tokens,
    load_config,
)
from mailbox_actors.platform.locks import DataDirLock, DataDirLocked
from mailbox_actors.runtime.settings import SettingsError

__all__ = ["CLUSTER_FILE", "ClusterSupervisor", "add_arguments", "read_cluster_file", "run"]

_SETTINGS_ERROR = 2  # what `serve` exits with when it refuses its settings
# Settings each node gets its own value of (flags), or that travel another way (the tokens).
_PER_NODE = frozenset({"data", "host", "port", "nodes", "node_name", "token", "token_file",
                       "operator_token", "operator_token_file", "control_db", "queues_db",
                       "smtp_listen_port"})
# A node that dies is restarted at once; one that dies again soon after waits longer each time
# (a node that keeps failing must not spin). A node that ran _STEADY_S before it died starts the
# sequence again.
_RESTART_BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 5.0)
_STEADY_S = 60.0
_TICK_S = 0.1  # the supervisor's loop wakes at least this often (health checks, a stop)
# A node that was ready and then leaves /healthz unanswered for health_timeout_s (default 10 s) is
# killed and restarted. Generous: a node busy with a burst still answers /healthz within
# milliseconds, so only a stopped or wedged process stays silent for seconds.
_HEALTH_PERIOD_S = 0.5
_HEALTH_TIMEOUT_S = 1.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, command="cluster")


def run(args: argparse.Namespace) -> int:
    try:
        flags = flags_of(args)
        cfg = load_config(flags, os.environ, args.config)
        if cfg.objects:  # UI-7: refused here, once, rather than by every node in a loop
            from mailbox_actors.node.user_objects import served_objects

            served_objects(cfg.objects)
    except SettingsError as e:
        print(f"mailbox-actors cluster: {e}", file=sys.stderr)
        return 2
    lock = DataDirLock(Path(cfg.data).resolve())
    try:
        lock.acquire()  # before anything in DIR is written: cluster.json belongs to the holder
    except DataDirLocked:
        from mailbox_actors.platform.locks import lock_holder

        holder = lock_holder(Path(cfg.data).resolve())
        print(f"mailbox-actors cluster: {cfg.data} is in use by another cluster or node (pid "
              f"{holder if holder and holder > 0 else 'unknown'}); stop it with "
              f"'mailbox-actors stop --data {cfg.data}' or use another data directory",
              file=sys.stderr)
        return 2
    try:
        try:
            sup = ClusterSupervisor(cfg)
        except SettingsError as e:
            print(f"mailbox-actors cluster: {e}", file=sys.stderr)
            return 2
        return sup.run()
    finally:
        lock.release()


class ClusterSupervisor:
    def __init__(self, cfg: NodeConfig, *, out: Any = None) -> None:
        self.data = Path(cfg.data).resolve()
        # One id secret for every node (OPS-8): generated into DIR once, given to each node in
        # its environment, never in argv.
        secret, self.id_secret_file = ensure_id_secret(cfg, self.data)
        self.cfg = cfg = msgspec.structs.replace(cfg, id_secret=secret)
        self.tokens = ensure_tokens(cfg, self.data)
        self.out = out or sys.stdout
        self.names = [f"node-{i}" for i in range(cfg.nodes)]
        self.urls = [f"http://{cfg.host}:{cfg.port + i}" for i in range(cfg.nodes)]
        # The SMTP door of node i (IN-5), beside its HTTP port; None when not asked for.
        self.smtp = [None if cfg.smtp_listen_port is None else
                     f"{cfg.host}:{cfg.smtp_listen_port + i if cfg.smtp_listen_port else 0}"
                     for i in range(cfg.nodes)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * cfg.nodes
        # A descriptor per node process that turns readable when it exits (Linux's pidfd): the
        # supervisor is told of a death at once, where a poll would notice it a tick later.
        self._exits: list[int | None] = [None] * cfg.nodes
        self._spawned_at = [0.0] * cfg.nodes
        self._quick_deaths = [0] * cfg.nodes  # deaths in a row, each soon after its start
        self.restarts = [0] * cfg.nodes
        self._last_ok: list[float | None] = [None] * cfg.nodes  # None: not ready since spawned
        self._failing_since: list[float | None] = [None] * cfg.nodes  # first failed probe
        self._next_check = 0.0
        self.failed = False  # a node refused its settings
        self._stopping = False

    def say(self, text: str) -> None:
        print(f"cluster: {text}", file=self.out, flush=True)

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        peers = ",".join(f"{n}={u}" for n, u in zip(self.names, self.urls, strict=True))
        env = dict(os.environ)
        # Every cluster-wide setting, however the supervisor got it (flag, environment, TOML
        # file), reaches the node through its environment, which only the node's own flags
        # outrank: never argv, where `ps` would show the tokens and the id secret.
        for name in NodeConfig.__struct_fields__:
            value = getattr(self.cfg, name)
            if name in _PER_NODE:
                env.pop(ENV_PREFIX + name.upper(), None)  # the node's own comes as a flag
            elif isinstance(value, tuple):  # objects (UI-7): a list, comma-separated
                env[ENV_PREFIX + name.upper()] = ",".join(value)
            elif value is not None:
                env[ENV_PREFIX + name.upper()] = str(value)
        env[ENV_PREFIX + "TOKEN"] = self.tokens.cluster
        env[ENV_PREFIX + "OPERATOR_TOKEN"] = self.tokens.operator
        env.pop(ENV_PREFIX + "CONFIG", None)  # read once, here
        env[SUPERVISOR_ENV] = str(os.getpid())
        cmd = [sys.executable, "-m", "mailbox_actors", "serve", "--data",
               str(self.data / self.names[i]), "--host", self.cfg.host,
               "--port", str(self.cfg.port + i), "--node-name", self.names[i], "--peers", peers,
               # One control database and one queue file for the whole cluster.
               "--control-db", self.cfg.control_db or str(self.data / "control.sqlite"),
               "--queues-db", self.cfg.queues_db or str(self.data / "queues.sqlite")]
        if self.cfg.smtp_listen_port is not None:
            port = self.cfg.smtp_listen_port
            cmd += ["--smtp-listen-port", str(port + i if port else 0)]
        # Its standard input is a pipe only this process writes to: when we die, it reads EOF.
        self._last_ok[i] = self._failing_since[i] = None
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE)
        self._watch_exit(i, proc.pid)
        self._spawned_at[i] = time.monotonic()
        return proc

    def _watch_exit(self, i: int, pid: int) -> None:
        old = self._exits[i]
        if old is not None:
            os.close(old)
        try:
            self._exits[i] = os.pidfd_open(pid)
        except (AttributeError, OSError):  # not Linux 5.3+: the loop's tick notices instead
            self._exits[i] = None

    def wait_for_exit(self, timeout_s: float) -> None:
        """Sleep up to ``timeout_s``, woken at once when a node process exits."""
        fds = [fd for fd in self._exits if fd is not None]
        if fds:
            select.select(fds, [], [], timeout_s)
        else:
            time.sleep(timeout_s)

    def _close_exits(self) -> None:
        for i, fd in enumerate(self._exits):
            if fd is not None:
                os.close(fd)
                self._exits[i] = None

    def write_cluster_file(self) -> None:
        doc = {
            "nodes": [{"name": n, "url": u, "pid": p.pid if p else None,
                       "data": str(self.data / n), "restarts": r, "smtp": smtp}
                      for n, u, p, r, smtp in zip(self.names, self.urls, self.procs,
                                                  self.restarts, self.smtp, strict=True)],
            "supervisor_pid": os.getpid(),
            "cluster_token_file": self.tokens.cluster_file,
            "operator_token_file": self.tokens.operator_file,
        }
        tmp = self.data / (CLUSTER_FILE + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, self.data / CLUSTER_FILE)

    def wait_healthy(self, i: int, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            p = self.procs[i]
            if p is None or p.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.urls[i] + "/healthz", timeout=1) as r:
                    # Its own node, not whatever else answers on that port.
                    if r.status == 200 and json.loads(r.read()).get("pid") == p.pid:
                        self._last_ok[i] = time.monotonic()
                        return True
            except (OSError, ValueError):
                pass
            time.sleep(0.05)  # an operator tool polling a child's port, not a test
        return False

    def start(self) -> None:
        self.say(f"starting {len(self.names)} nodes, data in {self.data}")
        self.say(f"cluster token in {self.tokens.cluster_file or '(given)'}, "
                 f"operator token in {self.tokens.operator_file or '(given)'}")
        for i in range(len(self.names)):
            self.procs[i] = self._spawn(i)
        self.write_cluster_file()
        for i, name in enumerate(self.names):
            ok = self.wait_healthy(i)
            self.say(f"{name} {'ready' if ok else 'NOT ready'} at {self.urls[i]} "
                     f"(pid {self._pid(i)})" + (f", SMTP at {self.smtp[i]}" if self.smtp[i]
                                               else ""))

    def _pid(self, i: int) -> str:
        p = self.procs[i]
        return "-" if p is None else str(p.pid)

    def _answers(self, i: int, p: subprocess.Popen[bytes]) -> bool:
        try:
            with urllib.request.urlopen(self.urls[i] + "/healthz",
                                        timeout=_HEALTH_TIMEOUT_S) as r:
                return bool(r.status == 200 and json.loads(r.read()).get("pid") == p.pid)
        except (OSError, ValueError):
            return False

    def check_health(self) -> None:
        """Kill a node that was ready and has not answered /healthz for health_timeout_s; the
        next ``supervise_once`` restarts it like any node that exited (OPS-1)."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + _HEALTH_PERIOD_S
        for i, p in enumerate(self.procs):
            if p is None or p.poll() is not None or self._stopping:
                continue
            last = self._last_ok[i]  # None: not ready yet since it was spawned, so not judged
            asked = time.monotonic()
            if self._answers(i, p):
                self._last_ok[i] = time.monotonic()
                self._failing_since[i] = None
                continue
            if last is None:
                continue
            # Silent for health_timeout_s means probes failing for that long, counted from the
            # first failed one: not from the last answer, which is stale after the supervisor
            # spent seconds starting or restarting another node without probing this one (a
            # single slow answer on a loaded machine then killed a healthy node).
            failing = self._failing_since[i]
            if failing is None:
                self._failing_since[i] = asked
            elif time.monotonic() - failing > self.cfg.health_timeout_s:
                self.say(f"{self.names[i]} (pid {p.pid}) has not answered /healthz for "
                         f"{self.cfg.health_timeout_s:g} s; killing it")
                p.kill()
                p.wait()

    def supervise_once(self) -> None:
        """Restart any node that has exited (CL-2)."""
        for i, p in enumerate(self.procs):
            if p is None or p.poll() is None or self._stopping:
                continue
            if p.returncode == _SETTINGS_ERROR:
                # Restarting cannot help: the node refused its settings (it said why above).
                self.say(f"{self.names[i]} exited with status {p.returncode} (it refused to "
                         "start: its settings or a damaged file, said above); not restarting it: "
                         "stopping the cluster")
                self.failed = True
                self._stopping = True
                return
            if p.stdin is not None:
                p.stdin.close()  # that node's lifeline; the new one gets its own
            self.restarts[i] += 1
            lived = time.monotonic() - self._spawned_at[i]
            before = 0 if lived >= _STEADY_S else self._quick_deaths[i]  # quick deaths before
            delay = _RESTART_BACKOFF_S[min(before, len(_RESTART_BACKOFF_S) - 1)]
            self._quick_deaths[i] = before + 1
            self.say(f"{self.names[i]} exited with status {p.returncode}; restarting in "
                     f"{delay:.1f} s (restart {self.restarts[i]})")
            time.sleep(delay)
            self.procs[i] = self._spawn(i)
            self.write_cluster_file()
            ok = self.wait_healthy(i)
            self.say(f"{self.names[i]} {'back' if ok else 'NOT back'} at {self.urls[i]} "
                     f"(pid {self._pid(i)})")

    def stop(self, grace_s: float | None = None) -> None:
        self._stopping = True
        grace = self.cfg.shutdown_grace_ms / 1000 + 2 if grace_s is None else grace_s
        self.say("stopping nodes")
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for i, p in enumerate(self.procs):
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{self.names[i]} did not stop in time; killing it")
                p.kill()
                p.wait()
            if p.stdin is not None:
                p.stdin.close()
        (self.data / CLUSTER_FILE).unlink(missing_ok=True)
        self.say("stopped")

    def run(self) -> int:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            self._stopping = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            self.start()
            self.say("running; Ctrl-C stops every node")
            while not self._stopping:
                self.supervise_once()
                self.check_health()
                self.wait_for_exit(_TICK_S)
        finally:
            self.stop()
            self._close_exits()
        return _SETTINGS_ERROR if self.failed else 0
