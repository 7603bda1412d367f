"""The node side of the start figure (``start_figures``): ``python -m
mailbox_actors.bench.start_child DATA [init]`` starts a node on DATA, answers one TenantQuota
``usage`` call (creating the actor first with ``init``), prints ``ready`` and stops."""

from __future__ import annotations

import sys

__all__: list[str] = []  # a child process entry point: nothing to import


async def _main(data: str, init: bool) -> None:
    from mailbox_actors.bench.runtime_figures import BIG_LIMIT, envelope
    from mailbox_actors.node import Node
    from mailbox_actors.objects import TenantQuota
    from mailbox_actors.runtime.settings import RuntimeSettings
    from mailbox_actors.wire.quota import QuotaInit, QuotaUsage

    async with Node(RuntimeSettings(data_dir=data), objects=(TenantQuota,)) as node:
        oid = node.id_from_name(TenantQuota.namespace, "start")
        if init:
            await node.call_bytes(TenantQuota.namespace, oid,
                                  envelope(QuotaInit(per_minute=BIG_LIMIT, per_day=BIG_LIMIT)))
        out = await node.call_bytes(TenantQuota.namespace, oid, envelope(QuotaUsage()))
        if not out.startswith(b'{"ok"'):
            raise SystemExit(f"usage failed: {out[:200]!r}")
        print("ready", flush=True)


if __name__ == "__main__":
    import anyio

    from mailbox_actors.platform.logging import configure_logging

    configure_logging(level="error")
    anyio.run(_main, sys.argv[1], sys.argv[2:] == ["init"])
