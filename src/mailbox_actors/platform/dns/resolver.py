"""The ``Resolver`` protocol (DM-1): one question, one typed ``Answer``, never an exception.

Records, NXDOMAIN, NODATA, oversize, timeout, SERVFAIL and unreadable replies are distinct
outcomes (``core.dns.answers``), so the checks decide pass, fail or unknown from values. The node
registers one under ``RESOLVER``; ``DnsSettings`` are the settings the real one is built from.
"""

from __future__ import annotations

from typing import Protocol

import anyio
import msgspec

from mailbox_actors.core.dns.answers import Answer, Rtype
from mailbox_actors.platform.services import ServiceKey

__all__ = ["RESOLVER", "DnsSettings", "Resolver", "ResolverOnFirstUse"]


class Resolver(Protocol):
    async def resolve(self, name: str, rtype: Rtype) -> Answer:
        """Ask once (with the resolver's own retries); every failure is an ``Answer`` outcome."""
        ...

    async def aclose(self) -> None:
        """Release sockets and caches; the resolver may not be used afterwards."""
        ...


class DnsSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How the real resolver asks. No nameservers: the system's (``/etc/resolv.conf``)."""

    nameservers: tuple[str, ...] = ()
    port: int = 53
    timeout_ms: int = 2_000  # per attempt
    attempts: int = 2  # tries in all, across the nameservers
    # Ask the zone's own nameservers (found through the configured ones), so an answer never comes
    # from a recursive resolver's cache that still holds "not found" for a record just added.
    authoritative: bool = False


class ResolverOnFirstUse:
    """The real resolver (``platform.dns.real``), built at the first question: dnspython is
    imported and ``/etc/resolv.conf`` read then, so a node that checks no domain never pays for
    them before it answers. It is built in a worker thread (the import and the file read would
    hold the event loop), once however many first questions arrive together."""

    def __init__(self, settings: DnsSettings) -> None:
        self.settings = settings
        self._real: Resolver | None = None
        self._building = anyio.Lock()

    def _build(self) -> Resolver:
        from mailbox_actors.platform.dns.real import DnspythonResolver

        return DnspythonResolver(self.settings)

    async def resolve(self, name: str, rtype: Rtype) -> Answer:
        real = self._real
        if real is None:
            async with self._building:
                if self._real is None:
                    self._real = await anyio.to_thread.run_sync(self._build)
            real = self._real
        return await real.resolve(name, rtype)

    async def aclose(self) -> None:
        if self._real is not None:
            await self._real.aclose()


# The node's resolver, as objects ask for it (``ctx.service(RESOLVER)``).
RESOLVER: ServiceKey[Resolver] = ServiceKey("dns_resolver")
