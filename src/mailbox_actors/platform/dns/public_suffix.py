"""The organizational domain of a name (RFC 7489 3.2): its public suffix and one label more, from
the Public Suffix List the ``publicsuffixlist`` package bundles (ADR 0014).

DMARC falls back to the organizational domain's record when a domain has none of its own. The
list is parsed once per process, in a worker thread on first use (about 70 ms: a node that never
checks a domain never pays it, and the event loop never waits on it).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

__all__ = ["organizational_domain"]

_lock = threading.Lock()
_list: PublicSuffixList | None = None


def _load() -> PublicSuffixList:
    global _list
    with _lock:
        if _list is None:
            from publicsuffixlist import PublicSuffixList
            _list = PublicSuffixList()
        return _list


async def organizational_domain(name: str) -> str | None:
    """``mail.example.co.uk`` -> ``example.co.uk``; None for a public suffix itself (``co.uk``)
    or a name the list cannot place. ``name`` is an A-label domain, as DomainMonitor keeps it."""
    psl = _list if _list is not None else await anyio.to_thread.run_sync(_load)
    org = psl.privatesuffix(name.lower().rstrip("."))
    return org if isinstance(org, str) else None
