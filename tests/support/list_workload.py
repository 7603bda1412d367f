"""The fault test's workload (CL-16): clients appending unique values to ~30 lists and reading
them back through any machine, writing a history of invoke/ok/fail/timeout as JSON lines.

Clients run concurrently in the test process, paced to at most ``rate`` operations a second in
all. Where a request goes is a ``Routes``' choice (every machine at random, or the holder of the
id's slot from ``GET /cluster``); a call that gets no answer within ``timeout_s`` is a timeout, an
error answer a fail (its code kept). Time in the history is the test process's monotonic clock, so
the checker's real-time order compares instants of one clock.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import anyio

from faults_actor import NAMESPACE
from mailbox_actors.http.client import HttpPool, HttpTransportError

__all__ = ["AnyMachine", "ClusterMap", "HistoryLog", "ListWorkload", "Routes"]


class Routes(Protocol):
    def target(self, object_id: str, rng: random.Random) -> str:
        """The base URL to send a request for ``object_id`` to now."""
        ...

    async def follow(self, seconds: float) -> None:
        """Keep what routing needs up to date for this long."""
        ...


class AnyMachine:
    """Every machine is as good as any: each request to one picked at random (it forwards)."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = list(urls)

    def target(self, object_id: str, rng: random.Random) -> str:
        return rng.choice(self.urls)

    async def follow(self, seconds: float) -> None:
        return None


class ClusterMap:
    """Routing by the slot map of ``GET /cluster`` (CL-12), as a client holding no database
    credentials does: the id's slot from the cluster's slot count, its holder from the map, which
    is read again every ``refresh_s`` from whichever machine answers. ``random_share`` of the
    requests go to any machine instead (a stale or lazy client: the machine forwards or answers
    ``unavailable``), and so do requests for a slot the map gives no holder."""

    def __init__(self, pool: HttpPool, urls: Sequence[str], token: str, *,
                 refresh_s: float = 0.5, random_share: float = 0.2) -> None:
        self.pool, self.urls, self.token = pool, list(urls), token
        self.refresh_s, self.random_share = refresh_s, random_share
        self.slots = 0
        self.holders: dict[int, str] = {}
        self.doc: dict[str, Any] = {}  # the last map read
        self.reads = 0
        self._turn = 0

    async def refresh(self) -> bool:
        headers = {"authorization": f"Bearer {self.token}"}
        for _ in self.urls:
            url = self.urls[self._turn % len(self.urls)]
            self._turn += 1
            try:
                status, body = await self.pool.request(url, "GET", "/cluster", headers, b"",
                                                       timeout_s=1.0)
            except HttpTransportError:
                continue
            if status != 200:
                continue
            doc = self.doc = json.loads(body)
            self.slots = int(doc["slots"])
            self.holders = {r["slot"]: r["url"] for r in doc["map"] if r.get("url")}
            self.reads += 1
            return True
        return False

    async def holders_now(self) -> dict[str, Any]:
        """Slot -> [holder, epoch] as a machine answering now sees it."""
        await self.refresh()
        return {str(r["slot"]): [r.get("holder"), r.get("epoch")] for r in self.doc.get("map", [])}

    async def follow(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while True:
            await self.refresh()
            if time.monotonic() >= until:
                return
            await anyio.sleep(self.refresh_s)  # the client's refresh period

    def target(self, object_id: str, rng: random.Random) -> str:
        from mailbox_actors.cluster.slots import slot_of

        if not self.slots or not object_id or rng.random() < self.random_share:
            return rng.choice(self.urls)
        return self.holders.get(slot_of(self.slots, NAMESPACE, object_id)) or rng.choice(self.urls)


class HistoryLog:
    """The history as JSON lines, flushed line by line (a test that dies leaves what it saw)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._file: IO[str] = open(path, "a")  # closed by close()

    def write(self, **event: Any) -> None:
        event["time"] = time.monotonic()
        self.events.append(event)
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class ListWorkload:
    def __init__(self, pool: HttpPool, routes: Routes, log: HistoryLog, *, token: str,
                 tenant_id: str, keys: int = 30, clients: int = 8,
                 rate: float = 200.0, timeout_s: float = 3.0, read_share: float = 0.2,
                 seed: int = 0) -> None:
        self.pool, self.routes, self.log = pool, routes, log
        self.token, self.tenant_id = token, tenant_id
        self.keys = [f"k{i:02d}" for i in range(keys)]
        self.ids: dict[str, str] = {}  # from any machine (init_keys): clients hold no secret
        self.clients, self.rate, self.timeout_s = clients, rate, timeout_s
        self.read_share = read_share
        self.rng = random.Random(seed)
        self._ops = itertools.count(1)
        self._next_slot = 0.0

    async def call(self, key: str, req: dict[str, Any], timeout_s: float | None = None
                   ) -> tuple[str, Any]:
        """One request: ``("ok", value)``, ``("fail", code)`` or ``("timeout", reason)``."""
        timeout_s = timeout_s or self.timeout_s
        oid = self.ids[key]
        body = json.dumps({"v": 1, "tenant_id": self.tenant_id, "request_id":
                           f"req_{next(self._ops)}x{self.rng.randrange(1 << 30)}",
                           "deadline_ms": int(time.time() * 1000 + timeout_s * 1000),
                           "req": req}).encode()
        try:
            status, out = await self.pool.request(self.routes.target(oid, self.rng), "POST",
                                                  f"/rpc/{NAMESPACE}/{oid}", self._headers(), body,
                                                  timeout_s=timeout_s)
        except HttpTransportError as e:
            return "timeout", type(e).__name__
        try:
            reply = json.loads(out)
        except ValueError:
            return "fail", f"http {status}"
        if status == 200 and "ok" in reply:
            return "ok", reply["ok"]
        return "fail", (reply.get("err") or {}).get("code", f"http {status}")

    def _headers(self) -> dict[str, str]:
        return {"content-type": "application/json", "authorization": f"Bearer {self.token}"}

    async def init_keys(self, within_s: float = 60) -> None:
        """Learn each list's id from a machine, then create every list (claiming it for the
        tenant), retrying until each answers ok."""
        with anyio.fail_after(within_s):
            for key in self.keys:
                while key not in self.ids:
                    try:
                        status, out = await self.pool.request(
                            self.routes.target("", self.rng), "GET",
                            f"/ids/{NAMESPACE}/by-name/{key}", self._headers(), b"",
                            timeout_s=self.timeout_s)
                    except HttpTransportError:
                        status, out = 0, b""
                    if status == 200:
                        self.ids[key] = json.loads(out)["id"]
                    else:
                        await anyio.sleep(0.2)  # pacing a retry, bounded by fail_after
                while True:
                    if (await self.call(key, {"op": "init"}))[0] == "ok":
                        break
                    await anyio.sleep(0.2)  # pacing a retry, bounded by fail_after

    async def _pace(self) -> None:
        """Hold the whole workload to ``rate`` operations a second."""
        now = time.monotonic()
        self._next_slot = max(self._next_slot + 1 / self.rate, now)
        await anyio.sleep(self._next_slot - now)

    async def _client(self, process: int, until: float) -> None:
        for n in itertools.count():
            await self._pace()
            if time.monotonic() >= until:
                return
            key = self.rng.choice(self.keys)
            op = next(self._ops)
            if self.rng.random() < self.read_share:
                self.log.write(op=op, process=process, type="invoke", f="read", key=key)
                outcome, value = await self.call(key, {"op": "read"})
                self.log.write(op=op, process=process, type=outcome, f="read", key=key,
                               value=value if outcome == "ok" else None,
                               error=None if outcome == "ok" else value)
            else:
                v = f"c{process}-{n}"
                self.log.write(op=op, process=process, type="invoke", f="append", key=key,
                               value=v)
                outcome, value = await self.call(key, {"op": "append", "key": key, "value": v})
                self.log.write(op=op, process=process, type=outcome, f="append", key=key,
                               value=v, epoch=value["epoch"] if outcome == "ok" else None,
                               error=None if outcome == "ok" else value)

    async def run(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        async with anyio.create_task_group() as tg:
            for p in range(self.clients):
                tg.start_soon(self._client, p, until)

    async def final_lists(self, within_s: float = 60) -> dict[str, list[list[Any]]]:
        """Every list as it stands once the faults are healed (each read retried until ok)."""
        out: dict[str, list[list[Any]]] = {}
        last: dict[str, Any] = {}
        try:
            with anyio.fail_after(within_s):
                for key in self.keys:
                    while True:
                        outcome, value = await self.call(key, {"op": "read"})
                        if outcome == "ok":
                            out[key] = value
                            break
                        last[key] = (outcome, value)
                        await anyio.sleep(0.2)  # pacing a retry, bounded by fail_after
        except TimeoutError:
            missing = {k: last.get(k) for k in self.keys if k not in out}
            raise AssertionError(f"after the faults were healed, {len(missing)} lists could not "
                                 f"be read within {within_s} s; last answers: {missing}") from None
        return out
