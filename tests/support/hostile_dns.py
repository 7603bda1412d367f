"""A corpus of hostile DNS for DomainMonitor's checks, reused by the pure tests and the end-to-end
ones: ``HAND_WRITTEN`` zones (each a way real records break checkers) and ``generated(seed, n)``,
seeded mutations of them (a failure is reproducible from its seed).

A zone is a list of ``(name, type, value)`` for ``example.com`` and the names it points at; the
provider include ``_spf.provider.net`` is always published correctly.
"""

from __future__ import annotations

import random

__all__ = ["DOMAIN", "HAND_WRITTEN", "INCLUDE", "Zone", "generated", "with_base"]

DOMAIN = "example.com"
INCLUDE = "_spf.provider.net"
Zone = list[tuple[str, str, str]]
_BASE: Zone = [(INCLUDE, "TXT", "v=spf1 ip4:192.0.2.0/24 -all"),
               (DOMAIN, "MX", "10 mx1.provider.net")]
_LONG = "a" * 63


def _chain(n: int, loop: bool) -> Zone:
    out: Zone = [(DOMAIN, "TXT", f"v=spf1 include:{INCLUDE} include:l0.{_LONG}.net -all")]
    for i in range(n):
        nxt = f"l{(i + 1) % n if loop else i + 1}.{_LONG}.net"
        out.append((f"l{i}.{_LONG}.net", "TXT", f"v=spf1 include:{nxt}"))
    if not loop:
        out.append((f"l{n}.{_LONG}.net", "TXT", "v=spf1 -all"))
    return out


HAND_WRITTEN: dict[str, Zone] = {
    "spf_loop_of_long_names": _chain(6, loop=True),
    "spf_chain_over_the_limit": _chain(12, loop=False),
    "spf_self_redirect": [(DOMAIN, "TXT", "v=spf1 redirect=example.com")],
    "spf_two_records": [(DOMAIN, "TXT", "v=spf1 -all"), (DOMAIN, "TXT", "v=spf1 +all")],
    "spf_binary_junk": [(DOMAIN, "TXT", "v=spf1 \x00\x01\xff include: ~~all")],
    "spf_macro_include": [(DOMAIN, "TXT", "v=spf1 include:%{ir}.%{v}._spf.%{d} -all")],
    "spf_empty_terms": [(DOMAIN, "TXT", "v=spf1      ")],
    "spf_huge_record": [(DOMAIN, "TXT", "v=spf1 " + "ip4:192.0.2.1 " * 400 + "-all")],
    "spf_many_voids": [(DOMAIN, "TXT", f"v=spf1 include:{INCLUDE} a:n1.invalid mx:n2.invalid "
                                       "exists:n3.invalid a:n4.invalid -all")],
    "mx_many_hosts": [(DOMAIN, "MX", f"{i} mx{i}.{_LONG}.{_LONG}.net") for i in range(60)],
    "mx_null_and_more": [(DOMAIN, "MX", "0 ."), (DOMAIN, "MX", "10 mx1.provider.net")],
    "dkim_cname_to_nowhere": [(f"s1._domainkey.{DOMAIN}", "CNAME", "gone.provider.net")],
    "dkim_cname_loop": [(f"s1._domainkey.{DOMAIN}", "CNAME", "k1.provider.net"),
                        ("k1.provider.net", "CNAME", f"s1._domainkey.{DOMAIN}")],
    "dkim_garbage_tags": [(f"s1._domainkey.{DOMAIN}", "TXT", ";;;=;p;v=DKIM9;p=AAAA")],
    "dkim_huge_key": [(f"s1._domainkey.{DOMAIN}", "TXT", "v=DKIM1; p=" + "A" * 6000)],
    "dmarc_junk_tags": [(f"_dmarc.{DOMAIN}", "TXT", "v=DMARC1;;;p=reject;;x=\x00;=;==;pct=x")],
    "dmarc_lowercase_version": [(f"_dmarc.{DOMAIN}", "TXT", "v=dmarc1; p=none")],
    "dmarc_policy_junk": [(f"_dmarc.{DOMAIN}", "TXT", "v=DMARC1; p=" + "z" * 500)],
    "dmarc_many_records": [(f"_dmarc.{DOMAIN}", "TXT", f"v=DMARC1; p=none; n={i}")
                           for i in range(70)],
}


def _mutate(rng: random.Random, value: str) -> str:
    ops = [lambda v: v[:rng.randrange(len(v) + 1)],
           lambda v: v + rng.choice([" ", ";", "=", "%{d}", "include:", "redirect=", "\x00"]),
           lambda v: v.replace(rng.choice([" ", ";", ":", "="]), rng.choice(["", "  ", "::"])),
           lambda v: v.upper(),
           lambda v: v * rng.randrange(1, 4)]
    for _ in range(rng.randrange(1, 4)):
        value = rng.choice(ops)(value)
    return value


def generated(seed: int, n: int) -> list[tuple[str, Zone]]:
    """``n`` zones mutated from the hand-written ones (and the base records), from ``seed``."""
    rng = random.Random(seed)
    names = sorted(HAND_WRITTEN)
    out = []
    for i in range(n):
        zone = list(HAND_WRITTEN[rng.choice(names)])
        k = rng.randrange(len(zone))
        name, rtype, value = zone[k]
        if rtype in ("TXT", "MX") and value:
            zone[k] = (name, rtype, _mutate(rng, value))
        out.append((f"gen-{seed}-{i}", zone))
    return out


def with_base(zone: Zone) -> Zone:
    """The zone over the base records (its own records of a name and type replace the base's)."""
    own = {(n, t) for n, t, _ in zone}
    return [r for r in _BASE if (r[0], r[1]) not in own] + zone
