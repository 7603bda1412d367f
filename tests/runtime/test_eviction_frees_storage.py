"""An evicted actor's storage is freed when it is evicted, not at the cyclic collector's next pass
(RT-9, OPS-4): a full pass over thousands of evicted storages holds the event loop, and memory
held by them waits for it.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

import actors_for_tests as afs
from mailbox_actors.testing import TestRuntime


@pytest.mark.anyio
async def test_an_evicted_actors_storage_goes_with_its_last_reference(tmp_path: Path) -> None:
    """RT-9: with the cyclic collector off, evicting an actor that read and wrote its storage
    (rows counted, statements screened) leaves its storage (and with it its connection) no
    longer alive."""
    async with TestRuntime(tmp_path, objects=afs.ALL_OBJECTS) as rt:
        host = rt.node.host
        oid = await afs.new_scratch(rt, "freed")
        await rt.call("scratch", oid, afs.Put(k="k", v="v"), tenant_id=afs.TENANT)
        assert await rt.call("scratch", oid, afs.Get(k="k"), tenant_id=afs.TENANT) == "v"
        act = host.activate(afs.Scratch, oid, create=False)
        assert act is not None
        storage = weakref.ref(act.runtime_storage.sql)
        gc.collect()
        gc.disable()
        try:
            host.evict(act)
            del act
            assert storage() is None
        finally:
            gc.enable()
