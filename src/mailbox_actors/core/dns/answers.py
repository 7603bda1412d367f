"""What a resolver answers (DM-1), as values the checks read: records, or why there are none.

NXDOMAIN and NODATA are answers about the domain (a check may fail on them); a timeout, a SERVFAIL
or a garbled reply says nothing about it (a check answers unknown). Every outcome is a value, so no
resolver exception ever reaches a check. ``Query`` keys the answers a check was fed.
"""

from __future__ import annotations

import enum

import msgspec

__all__ = ["MAX_RECORDS", "MAX_RECORD_CHARS", "TRANSIENT", "VOID", "Answer", "Outcome", "Query",
           "Rtype"]

# Caps a resolver applies to what it hands on: an answer with more records, or one longer record,
# is OVERSIZE (DNS carries 64 KB over TCP; no mail record needs a fraction of it).
MAX_RECORDS = 64
MAX_RECORD_CHARS = 4096


class Rtype(enum.StrEnum):
    A = "A"
    AAAA = "AAAA"
    MX = "MX"
    TXT = "TXT"
    NS = "NS"


class Outcome(enum.StrEnum):
    RECORDS = "records"
    NXDOMAIN = "nxdomain"  # the name does not exist
    NODATA = "nodata"  # the name exists, without records of this type
    OVERSIZE = "oversize"  # records over MAX_RECORDS / MAX_RECORD_CHARS (not evaluated)
    TIMEOUT = "timeout"  # no nameserver answered in time
    SERVFAIL = "servfail"  # the nameservers answered SERVFAIL or REFUSED
    ERROR = "error"  # a reply that could not be read, or a name DNS cannot carry


VOID = frozenset({Outcome.NXDOMAIN, Outcome.NODATA})
TRANSIENT = frozenset({Outcome.TIMEOUT, Outcome.SERVFAIL, Outcome.ERROR})

Query = tuple[str, Rtype]


class Answer(msgspec.Struct, frozen=True):
    """One question's answer. ``records`` in presentation form: a TXT record's strings joined
    (RFC 7208 3.3), an MX as ``"preference exchange"``, an address as text. ``canonical_name`` is
    where a CNAME chain led, when it led elsewhere."""

    name: str
    rtype: Rtype
    outcome: Outcome
    records: tuple[str, ...] = ()
    canonical_name: str | None = None
    detail: str = ""  # for TIMEOUT/SERVFAIL/ERROR: what happened, for the operator

    @property
    def query(self) -> Query:
        return (self.name, self.rtype)
