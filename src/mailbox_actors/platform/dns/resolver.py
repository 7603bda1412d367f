"""The ``Resolver`` protocol (DM-1): one question, one typed ``Answer``, never an exception.

Records, NXDOMAIN, NODATA, oversize, timeout, SERVFAIL and unreadable replies are distinct
outcomes (``core.dns.answers``), so the checks decide pass, fail or unknown from values. The node
registers one under ``RESOLVER``; ``DnsSettings`` are the settings the real one is built from.
"""

from __future__ import annotations

from typing import Protocol

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
    them before it answers."""

    def __init__(self, settings: DnsSettings) -> None:
        self.settings = settings
        self._real: Resolver | None = None

    async def resolve(self, name: str, rtype: Rtype) -> Answer:
        if self._real is None:
            from mailbox_actors.platform.dns.real import DnspythonResolver

            self._real = DnspythonResolver(self.settings)
        return await self._real.resolve(name, rtype)

    async def aclose(self) -> None:
        if self._real is not None:
            await self._real.aclose()


# The node's resolver, as objects ask for it (``ctx.service(RESOLVER)``).
RESOLVER: ServiceKey[Resolver] = ServiceKey("dns_resolver")
