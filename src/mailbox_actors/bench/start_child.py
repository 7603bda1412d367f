"""The node side of the start figure (``start_figures``): ``python -m
mailbox_actors.bench.start_child DATA [init]`` starts a node on DATA, answers one TenantQuota
``usage`` call (creating the actor first with ``init``), prints ``ready`` and stops.

It imports what an embedding program would (the node, the object, the settings, the wire types),
not the rest of the benchmark, so the figure times a node's start and nothing of ours besides."""

from __future__ import annotations

import sys

__all__: list[str] = []  # a child process entry point: nothing to import

_FAR_DEADLINE_MS = 4_102_444_800_000  # 2100-01-01, as the other figures' requests
_BIG_LIMIT = 1_000_000_000  # runtime_figures.BIG_LIMIT: never the limit that answers


async def _main(data: str, init: bool) -> None:
    import msgspec

    from mailbox_actors.node import Node
    from mailbox_actors.objects import TenantQuota
    from mailbox_actors.runtime.settings import RuntimeSettings
    from mailbox_actors.wire.envelope import Envelope
    from mailbox_actors.wire.quota import QuotaInit, QuotaUsage

    def envelope(req: object) -> bytes:  # as a client sends it (runtime_figures' envelope)
        return msgspec.json.encode(Envelope(v=1, tenant_id="t_bench", request_id="req_start",
                                            deadline_ms=_FAR_DEADLINE_MS, req=req))

    async with Node(RuntimeSettings(data_dir=data), objects=(TenantQuota,)) as node:
        oid = node.id_from_name(TenantQuota.namespace, "start")
        if init:
            await node.call_bytes(TenantQuota.namespace, oid,
                                  envelope(QuotaInit(per_minute=_BIG_LIMIT, per_day=_BIG_LIMIT)))
        out = await node.call_bytes(TenantQuota.namespace, oid, envelope(QuotaUsage()))
        if not out.startswith(b'{"ok"'):
            raise SystemExit(f"usage failed: {out[:200]!r}")
        print("ready", flush=True)


if __name__ == "__main__":
    import anyio

    from mailbox_actors.platform.logging import configure_logging

    configure_logging(level="error")
    anyio.run(_main, sys.argv[1], sys.argv[2:] == ["init"])
