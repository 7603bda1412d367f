"""One run of the multi-machine fault test (CL-16): machines up, the workload under a seeded fault
schedule, everything healed, the final lists read, the webhook deliveries awaited, the checker run.

Every run leaves its artifacts in its directory: ``history.jsonl`` (invoke/ok/fail/timeout and the
faults), ``final.json``, ``final_state.json`` (the slot map at the end), ``delivered.json``,
``violations.json`` and ``logs/<machine>.log``;
``keep_artifacts`` copies them to ``build/faults/<run>/`` of the repository, where a reader of a
failed run (or CI's artifact upload) finds them after the test's directory is gone.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from history_checker import Violation, check
from list_workload import HistoryLog, ListWorkload, Routes
from machine_cluster import MachineCluster
from mailbox_actors.http.client import HttpPool
from mailbox_actors.wire.errors import ErrorCode
from nemesis import Fault, Nemesis, length_s
from webhook_sink import WebhookSink

__all__ = ["ARTIFACTS", "RunResult", "fault_run", "keep_artifacts"]

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "faults"
_KEPT = ("history.jsonl", "final.json", "final_state.json", "delivered.json", "violations.json",
         "logs")

WEBHOOK_SECRET = "whsec-faults-0123456789"


@dataclass
class RunResult:
    directory: Path
    events: list[dict[str, Any]]
    final: dict[str, list[list[Any]]]
    delivered: set[tuple[str, str]]
    violations: list[Violation]
    counts: dict[str, int] = field(default_factory=dict)
    final_state: dict[str, Any] = field(default_factory=dict)  # the slot map at the end

    def definite_errors(self) -> dict[str, int]:
        """Error answers that are not retryable, by code. Every request of the workload is valid
        and names a list that exists, so under faults only retryable codes (``unavailable``,
        ``timeout``, ``overloaded``) may come back; any other is a bug the checker cannot see."""
        out: dict[str, int] = {}
        for e in self.events:
            code = e.get("error")
            if e.get("type") == "fail" and not _retryable(code):
                out[str(code)] = out.get(str(code), 0) + 1
        return out

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for v in self.violations:
            kinds[v.kind] = kinds.get(v.kind, 0) + 1
        return (f"{self.counts} violations {kinds or 'none'}; non-retryable errors "
                f"{self.definite_errors() or 'none'}; artifacts in {self.directory} "
                f"(first: {[v.detail for v in self.violations[:3]]})")


async def fault_run(cluster: MachineCluster, faults: list[Fault], *,
                    make_tenant: Callable[[str], Awaitable[str]],
                    routes: Callable[[MachineCluster, HttpPool], Routes], seed: int,
                    rate: float = 150, keys: int = 30, clients: int = 8,
                    timeout_s: float = 3.0, delivery_within_s: float = 75) -> RunResult:
    """``make_tenant(webhook_url)`` creates the tenant whose events go to the receiver and
    returns its id; ``routes`` says where each request goes."""
    work = cluster.work
    sink = WebhookSink(WEBHOOK_SECRET)
    log = HistoryLog(work / "history.jsonl")
    try:
        url = await sink.start(cluster.net.host)
        tenant = await make_tenant(url)
        async with HttpPool(connect_timeout_s=timeout_s) as pool:
            await cluster.start_all(pool)
            route = routes(cluster, pool)
            await route.follow(0)
            load = ListWorkload(pool, route, log, token=cluster.token,
                                tenant_id=tenant, keys=keys, clients=clients, rate=rate,
                                timeout_s=timeout_s, seed=seed)
            await load.init_keys()
            nemesis = Nemesis(cluster, log.write, observe=getattr(route, "holders_now", None))
            async with anyio.create_task_group() as tg:
                tg.start_soon(load.run, length_s(faults) + 2)
                tg.start_soon(route.follow, length_s(faults) + 2)
                await anyio.sleep(1)  # a second of calm load before the first fault
                await nemesis.run(faults)
            cluster.net.heal()
            for m, proc in cluster.procs.items():  # a killed machine was started again
                if proc.poll() is not None:
                    cluster.spawn(m)
                await cluster.wait_ready(m, pool)
            async with anyio.create_task_group() as tg:
                tg.start_soon(route.follow, 30)  # bounded; cancelled once the lists are read
                final = await load.final_lists()
                tg.cancel_scope.cancel()
            log.close()
            acked = {(e["key"], e["value"]) for e in log.events
                     if e.get("type") == "ok" and e.get("f") == "append"}
            try:
                await sink.wait_for(acked, within_s=delivery_within_s)
            except TimeoutError:
                pass  # the checker names each missing event
            # What the cluster says of itself once everything settled (the slot map).
            observe = getattr(route, "holders_now", None)
            final_state = await observe() if observe is not None else {}
        violations = check(log.events, final, sink.delivered)
    finally:
        log.close()
        await sink.stop()
    counts = {"ops": sum(e.get("type") == "invoke" for e in log.events),
              "ok": sum(e.get("type") == "ok" for e in log.events),
              "fail": sum(e.get("type") == "fail" for e in log.events),
              "timeout": sum(e.get("type") == "timeout" for e in log.events),
              "delivered": len(sink.delivered)}
    (work / "final.json").write_text(json.dumps(final))
    (work / "delivered.json").write_text(json.dumps(sorted(sink.delivered)))
    (work / "violations.json").write_text(json.dumps([v.__dict__ for v in violations], indent=1))
    (work / "final_state.json").write_text(json.dumps(final_state))
    return RunResult(work, log.events, final, sink.delivered, violations, counts=counts,
                     final_state=final_state)


def _retryable(code: Any) -> bool:
    try:
        return ErrorCode(code).retryable
    except ValueError:  # not a code: an HTTP status without an error body
        return False


def keep_artifacts(work: Path, name: str) -> Path:
    """Copy a run's artifacts to ``build/faults/<name>/`` (replacing an earlier run's)."""
    dest = ARTIFACTS / name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for item in _KEPT:
        src = work / item
        if src.is_dir():
            shutil.copytree(src, dest / item)
        elif src.exists():
            shutil.copy2(src, dest / item)
    return dest
