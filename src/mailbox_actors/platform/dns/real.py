"""``DnspythonResolver``: the real resolver (DM-1) on dnspython's asyncio stub resolver.

Each question is asked with a per-attempt timeout and a lifetime of ``timeout x attempts``;
dnspython retries over TCP when a UDP reply is truncated. Every exception dnspython raises is
mapped to an outcome here (NXDOMAIN, NODATA, TIMEOUT, SERVFAIL, ERROR), and answers over the caps of
``core.dns.answers`` are OVERSIZE, so nothing raises into the checks. Nothing is cached: a check
reads what DNS says now. With ``authoritative`` the question goes to the zone's own nameservers.
"""

from __future__ import annotations

import time

import dns.asyncresolver
import dns.exception
import dns.flags
import dns.name
import dns.rdatatype
import dns.resolver

from mailbox_actors.core.dns.answers import (
    MAX_RECORD_CHARS,
    MAX_RECORDS,
    Answer,
    Outcome,
    Rtype,
)
from mailbox_actors.platform.dns.resolver import DnsSettings

__all__ = ["DnspythonResolver"]

_ZONE_NS_TTL_S = 300.0  # how long the zone -> nameserver addresses map is reused


def _text(rdata: object, rtype: Rtype) -> str:
    if rtype is Rtype.TXT:
        return b"".join(rdata.strings).decode("utf-8", "replace")  # type: ignore[attr-defined]
    if rtype is Rtype.MX:
        exchange = rdata.exchange  # type: ignore[attr-defined]
        return f"{rdata.preference} {exchange.to_text(omit_final_dot=True)}"  # type: ignore[attr-defined]
    if rtype is Rtype.NS:
        return str(rdata.target.to_text(omit_final_dot=True))  # type: ignore[attr-defined]
    return str(rdata.address)  # type: ignore[attr-defined]


def _name(n: dns.name.Name | None) -> str | None:
    return None if n is None else n.to_text(omit_final_dot=True).lower()


class DnspythonResolver:
    def __init__(self, settings: DnsSettings | None = None) -> None:
        self.settings = s = settings or DnsSettings()
        self._base = self._make(list(s.nameservers) or None)
        self._zones: dict[str, tuple[float, list[str]]] = {}

    def _make(self, nameservers: list[str] | None) -> dns.asyncresolver.Resolver:
        s = self.settings
        try:
            r = dns.asyncresolver.Resolver(configure=nameservers is None)
        except dns.resolver.NoResolverConfiguration:  # no resolv.conf: every answer is ERROR
            r = dns.asyncresolver.Resolver(configure=False)
        if nameservers is not None:
            r.nameservers = nameservers
        r.port = s.port
        r.timeout = s.timeout_ms / 1000
        r.lifetime = s.timeout_ms * s.attempts / 1000
        r.retry_servfail = False  # a SERVFAIL is an answer (unknown); the alarm checks again later
        r.cache = None
        return r

    async def resolve(self, name: str, rtype: Rtype) -> Answer:
        try:
            qname = dns.name.from_text(name)
        except (dns.exception.DNSException, ValueError, UnicodeError) as e:
            return Answer(name, rtype, Outcome.ERROR, detail=f"not a DNS name: {type(e).__name__}")
        if not self._base.nameservers:
            return Answer(name, rtype, Outcome.ERROR, detail="no nameservers are configured")
        resolver = self._base
        if self.settings.authoritative:
            # Finding the zone's nameservers is not a question about the name: whatever fails
            # there (a lame nameserver's NXDOMAIN included) says nothing about it.
            try:
                zone_resolver = await self._for_zone(qname)
            except dns.exception.Timeout:
                return Answer(name, rtype, Outcome.TIMEOUT,
                              detail="finding the zone's nameservers timed out")
            except (dns.exception.DNSException, OSError, ValueError, EOFError) as e:
                return Answer(name, rtype, Outcome.SERVFAIL,
                              detail=f"finding the zone's nameservers: {_brief(e)}")
            if zone_resolver is None:
                return Answer(name, rtype, Outcome.SERVFAIL,
                              detail="the zone's nameservers have no address")
            resolver = zone_resolver
        try:
            ans = await resolver.resolve(qname, rtype.value, raise_on_no_answer=False,
                                         search=False)
        except dns.resolver.NXDOMAIN as e:
            try:
                canon = _name(e.canonical_name)
            except (KeyError, IndexError, TypeError):
                canon = None
            return Answer(name, rtype, Outcome.NXDOMAIN,
                          canonical_name=canon if canon != name.lower() else None)
        except dns.exception.Timeout:
            return Answer(name, rtype, Outcome.TIMEOUT,
                          detail=f"{self.settings.attempts} attempt(s) of "
                          f"{self.settings.timeout_ms} ms")
        except dns.resolver.NoNameservers as e:
            return Answer(name, rtype, Outcome.SERVFAIL, detail=_brief(e))
        except (dns.exception.DNSException, OSError, ValueError, EOFError) as e:
            return Answer(name, rtype, Outcome.ERROR, detail=_brief(e))
        if ans.response.flags & dns.flags.TC:
            # Still truncated after the TCP retry (a server that cuts even its TCP replies): the
            # records are incomplete, so no absence or value can be read from them.
            return Answer(name, rtype, Outcome.ERROR, detail="the reply was truncated over TCP")
        canon = _name(ans.canonical_name)
        canonical = canon if canon != name.lower().removesuffix(".") else None
        if ans.rrset is None:
            return Answer(name, rtype, Outcome.NODATA, canonical_name=canonical)
        records = tuple(_text(r, rtype) for r in ans.rrset)
        if len(records) > MAX_RECORDS or any(len(r) > MAX_RECORD_CHARS for r in records):
            return Answer(name, rtype, Outcome.OVERSIZE, canonical_name=canonical,
                          detail=f"{len(records)} records, longest {max(map(len, records))}")
        return Answer(name, rtype, Outcome.RECORDS, records, canonical_name=canonical)

    async def _for_zone(self, qname: dns.name.Name) -> dns.asyncresolver.Resolver | None:
        """A resolver asking the zone's own nameservers (their addresses through the base one)."""
        zone = await dns.asyncresolver.zone_for_name(qname, resolver=self._base)
        key = zone.to_text()
        now = time.monotonic()
        cached = self._zones.get(key)
        if cached is None or cached[0] < now:
            ns = await self._base.resolve(zone, "NS")
            addrs: list[str] = []
            for r in ns:
                for rtype in ("A", "AAAA"):
                    try:
                        a = await self._base.resolve(r.target, rtype, raise_on_no_answer=False)
                    except dns.exception.DNSException:  # a lame nameserver: ask the others
                        continue
                    addrs += [x.address for x in (a.rrset or ())]
            if not addrs:
                return None
            cached = (now + _ZONE_NS_TTL_S, addrs)
            self._zones[key] = cached
        return self._make(cached[1])

    async def aclose(self) -> None:
        self._zones.clear()


def _brief(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:160]}"
