"""Domain names as the monitor keeps them: IDNA-normalised to the A-label, or refused (DM-5).

``idna`` implements IDNA 2008 with UTS 46 mapping (what browsers and mail software use), so a
U-label such as ``bücher.example`` becomes ``xn--bcher-kva.example`` and a name no registry could
hold (a bad label, a code point IDNA forbids) is refused with the reason.
"""

from __future__ import annotations

import re

import idna

from mailbox_actors.wire.domain import DOMAIN_PATTERN

__all__ = ["NameRefused", "dns_name", "normalise_domain", "normalise_host"]

_DOMAIN = re.compile(DOMAIN_PATTERN)
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


class NameRefused(ValueError):
    """The text is not a domain name; the message says why (never echoing more than the name)."""


def normalise_domain(text: str) -> str:
    """The A-label form of ``text`` (lower case, no trailing dot), or ``NameRefused``."""
    name = text.strip().lower().removesuffix(".")
    if not name:
        raise NameRefused("the domain is empty")
    if not name.isascii() or "xn--" in name:
        try:
            name = idna.encode(name, uts46=True, transitional=False).decode("ascii")
            idna.decode(name)  # an A-label must decode to a valid U-label
        except (idna.IDNAError, UnicodeError, ValueError) as e:
            raise NameRefused(f"the domain is not a valid internationalised name ({e})") from None
    if len(name) > 253:
        raise NameRefused("the domain is longer than 253 characters")
    if not _DOMAIN.fullmatch(name):
        raise NameRefused("the domain must be a DNS name such as example.com (labels of letters, "
                          "digits and hyphens, up to 63 characters, a top-level label)")
    return name


def normalise_host(text: str) -> str:
    """A host name from a record (an MX exchange, an include target): lower case, no trailing dot."""
    return text.strip().lower().removesuffix(".")


def dns_name(*labels: str) -> str | None:
    """Join labels into a name DNS can carry (underscore labels allowed, as in ``_dmarc``); None
    when a label or the whole name is over DNS's sizes."""
    name = ".".join(labels)
    if len(name) > 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        return None
    return name
