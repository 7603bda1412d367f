"""Threads for the arrival-order tests (IN-2, IN-11): a reference JWZ threader, a small thread of
a real mailing list's shape, and a seeded generator of a mailing-list-like corpus.

``jwz(messages)`` is Jamie Zawinski's threading algorithm (https://www.jwz.org/doc/threading.html),
steps 1 to 4, written here from its description: containers by Message-ID, References linked
parent to child without loops, the message put under its last reference, the root set, empty
containers pruned (which changes no thread's membership). Step 5 (grouping roots by subject) is
left out on purpose: IN-2 says a subject alone never merges threads. It answers the threads as
sets of message names, on the messages' archive order.

``PATCH_SERIES`` is the header shape git send-email gives a patch series and its review on a
kernel list (a cover letter, patches In-Reply-To it, reviews and replies nested under patches, a
v2 cover that References v1): the shape only, with made-up ids and no content.

``corpus(seed)`` generates a mailing-list archive of that kind: long discussion trees (100 and 48
messages, like the LKML threads the issue measured), patch series, messages whose parents never
reached the list, References cut the way mail clients cut them (the root and the newest ones
kept), some replies with In-Reply-To only, and one-message threads. Every References list is a
subsequence of the message's real ancestry, as mail clients write it. Real mailing-list mail, for
the same checks, is ``real_mail.py``'s.
"""

from __future__ import annotations

import itertools
import random
import zlib
from dataclasses import dataclass, field

__all__ = ["PATCH_SERIES", "Mail", "corpus", "jwz", "raw", "shuffled"]


@dataclass(frozen=True)
class Mail:
    name: str
    message_id: str | None
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    subject: str = "s"


@dataclass
class _Container:
    message: str | None = None
    parent: _Container | None = None
    children: list[_Container] = field(default_factory=list)

    def reaches(self, other: _Container) -> bool:
        """Whether ``other`` is this container or one of its descendants."""
        stack = [self]
        while stack:
            c = stack.pop()
            if c is other:
                return True
            stack.extend(c.children)
        return False

    def unlink(self) -> None:
        if self.parent is not None:
            self.parent.children.remove(self)
            self.parent = None

    def link_under(self, parent: _Container) -> None:
        self.unlink()
        self.parent = parent
        parent.children.append(self)


def jwz(messages: list[Mail]) -> list[frozenset[str]]:
    """JWZ steps 1-4 over the messages in their order: the threads, as sets of names."""
    table: dict[str, _Container] = {}
    every: list[_Container] = []

    def container(mid: str) -> _Container:
        if mid not in table:
            table[mid] = _Container()
            every.append(table[mid])
        return table[mid]

    for m in messages:
        # 1A: this message's container (a repeated Message-ID gets a container of its own).
        if m.message_id is not None and table.get(m.message_id) is not None \
                and table[m.message_id].message is None:
            this = table[m.message_id]
        else:
            this = _Container()
            every.append(this)
            if m.message_id is not None and m.message_id not in table:
                table[m.message_id] = this
        this.message = m.name
        # 1B: References (In-Reply-To when there are none) linked in order, never into a loop.
        refs = list(m.references) or ([m.in_reply_to] if m.in_reply_to else [])
        refs = [r for r in refs if r != m.message_id]
        for up, down in itertools.pairwise(refs):
            parent, child = container(up), container(down)
            if child.parent is None and not child.reaches(parent):
                child.link_under(parent)
        # 1C: the message goes under its last reference (or becomes a root).
        if refs:
            last = container(refs[-1])
            if not this.reaches(last):
                this.link_under(last)
        else:
            this.unlink()
    threads: list[frozenset[str]] = []
    for root in every:
        if root.parent is not None:
            continue
        names: set[str] = set()
        stack = [root]
        while stack:
            c = stack.pop()
            if c.message is not None:
                names.add(c.message)
            stack.extend(c.children)
        if names:
            threads.append(frozenset(names))
    return threads


def _series(prefix: str, patches: int, reviews: list[tuple[int, int]],
            previous: str | None = None) -> list[Mail]:
    """A git send-email series: cover 0/N, patches In-Reply-To and References the cover."""
    cover = f"{prefix}-0@example.org"
    refs: tuple[str, ...] = (previous,) if previous else ()
    out = [Mail(f"{prefix}/0", cover, previous, refs)]
    for i in range(1, patches + 1):
        out.append(Mail(f"{prefix}/{i}", f"{prefix}-{i}@example.org", cover, (*refs, cover)))
    for n, (patch, depth) in enumerate(reviews):
        chain = [*refs, cover, f"{prefix}-{patch}@example.org"]
        for d in range(depth):
            mid = f"{prefix}-r{n}.{d}@example.net"
            out.append(Mail(f"{prefix}/r{n}.{d}", mid, chain[-1], tuple(chain)))
            chain.append(mid)
    return out


# v1 of a three-patch series with a review of patch 2 and the author's answer, then a v2 cover
# that refers to v1's cover: seven messages, one thread.
PATCH_SERIES: list[Mail] = [*_series("v1", 3, [(2, 2)])[:6],
                            Mail("v2/0", "v2-0@example.org", "v1-0@example.org",
                                 ("v1-0@example.org",))]


def _tree(rnd: random.Random, prefix: str, size: int, lost: float, irt_only: float,
          cut: int) -> list[Mail]:
    """A discussion tree of ``size`` messages in archive order: replies go mostly to recent
    messages (conversations move on); some parents never reached the list (``lost``)."""
    ancestry: list[tuple[str, ...]] = []  # each message's full chain of ancestors, oldest first
    ids: list[str] = []
    out: list[Mail] = []
    i = -1
    while len(out) < size:
        i += 1
        mid = f"{prefix}.{i}@lists.example.org"
        if i == 0:
            chain: tuple[str, ...] = ()
        else:
            j = max(0, len(ids) - 1 - int(rnd.expovariate(0.3)))
            chain = (*ancestry[j], ids[j])
        ids.append(mid)
        ancestry.append(chain)
        if i > 0 and rnd.random() < lost:
            continue  # this one never reached the list; its replies still name it
        if chain and rnd.random() < irt_only:
            out.append(Mail(f"{prefix}/{i}", mid, chain[-1], ()))
        else:
            refs = chain if len(chain) <= cut else (chain[0], *chain[-(cut - 1):])
            out.append(Mail(f"{prefix}/{i}", mid, chain[-1] if chain else None, refs))
    return out


def corpus(seed: int) -> list[Mail]:
    """A mailing-list archive in archive order: two long trees (100 and 48 messages), shorter
    ones, two patch series, and one-message threads, interleaved as a list's days are."""
    rnd = random.Random(seed)
    threads = [_tree(rnd, "long", 100, 0.03, 0.1, 12), _tree(rnd, "mid", 48, 0.05, 0.1, 8)]
    threads += [_tree(rnd, f"t{k}", rnd.randint(2, 20), 0.05, 0.2, 6) for k in range(6)]
    threads += [_series(f"s{k}", rnd.randint(2, 6), [(1, 3), (2, 1)]) for k in range(2)]
    threads += [[Mail(f"one{k}", f"one{k}@lists.example.org")] for k in range(8)]
    queues = [list(t) for t in threads]
    archive: list[Mail] = []
    while any(queues):  # interleave, each thread's messages kept in their own order
        q = rnd.choice([q for q in queues if q])
        archive.append(q.pop(0))
    return archive


def shuffled(messages: list[Mail], seed: int) -> list[Mail]:
    out = list(messages)
    random.Random(seed).shuffle(out)
    return out


def raw(m: Mail, to: str) -> bytes:
    """The message as it would arrive: headers only as much as threading reads, a short body."""
    head = [f"From: poster-{zlib.crc32(m.name.encode()) % 97}@lists.example.org", f"To: {to}",
            f"Subject: {m.subject}"]
    if m.message_id is not None:
        head.append(f"Message-ID: <{m.message_id}>")
    if m.in_reply_to is not None:
        head.append(f"In-Reply-To: <{m.in_reply_to}>")
    if m.references:
        head.append("References: " + "\r\n ".join(f"<{r}>" for r in m.references))
    return ("\r\n".join(head) + f"\r\n\r\nmessage {m.name}\r\n").encode()
