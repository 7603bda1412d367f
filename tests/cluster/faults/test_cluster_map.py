"""The fault test's clients route as a client of many machines does (CL-12, CL-16): by the slot map
of ``GET /cluster`` read from whichever machine answers, to the holder of the id's slot, and to
any machine when the map names none."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest

from list_workload import ClusterMap
from live_node import TOKEN
from mailbox_actors.cluster.slots import slot_of
from mailbox_actors.http.client import HttpPool
from mailbox_actors.http.server import RpcHttpServer
from mailbox_actors.testing.ports import free_port

SLOTS = 4


class MapServer:
    def __init__(self, holders: dict[int, str | None]) -> None:
        self.holders = holders
        self.asked: list[str | None] = []

    async def __call__(self, method: str, path: str, headers: Mapping[str, str],
                       body: bytes) -> tuple[int, bytes, str]:
        self.asked.append(headers.get("authorization"))
        doc: dict[str, Any] = {"slots": SLOTS, "map": [
            {"slot": s, "holder": None if u is None else f"m{s}", "epoch": 1, "url": u}
            for s, u in self.holders.items()]}
        return 200, json.dumps(doc).encode(), "application/json"


@pytest.mark.anyio
async def test_requests_go_to_the_holder_of_their_slot() -> None:
    """CL-12: the id's slot is computed from the map's slot count; its holder's URL is the target;
    a slot without a holder goes to any machine; the map is read with the cluster token from the
    first machine that answers (a dead one is skipped)."""
    server = MapServer({0: "http://h0", 1: "http://h1", 2: None, 3: "http://h3"})
    http = RpcHttpServer(server)
    port = await http.start("127.0.0.1", 0)
    dead = f"http://127.0.0.1:{free_port()}"
    try:
        async with HttpPool() as pool:
            routes = ClusterMap(pool, [dead, f"http://127.0.0.1:{port}"], TOKEN, random_share=0)
            await routes.follow(0)
            assert routes.slots == SLOTS and routes.reads == 1
            assert server.asked == [f"Bearer {TOKEN}"]
            rng = random.Random(3)
            for n in range(40):
                oid = f"{n:064x}"
                slot = slot_of(SLOTS, "fault_list", oid)
                target = routes.target(oid, rng)
                if slot == 2:
                    assert target in routes.urls
                else:
                    assert target == f"http://h{slot}"
            state = await routes.holders_now()
            assert state["2"] == [None, 1] and state["0"] == ["m0", 1]
    finally:
        await http.stop()
