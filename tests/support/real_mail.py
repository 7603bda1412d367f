"""Real mailing-list mail for the threading tests (IN-2, IN-11), fetched at test time.

Debian's source package of notmuch (the mail indexer) ships real mail as its test corpora, in
maildirs under ``test/corpora/``: ``lkml`` (210 messages of Linux kernel mailing list threads of
2009 to 2011, among them a 100-message and an 80-message thread, with References that the mail
clients cut from the front, and 34 messages there twice, once as received through gmane) and
``default`` (53 messages of the notmuch list's first weeks, November 2009); and ``threading`` (12
messages of notmuch's own threading cases: real mail to a ticket tracker and its replies, replies
to a message that never arrived, a References that misspells its parent's id). Nothing of it is
stored in this repository: the first test that needs it downloads the source tarball with
``apt-get source`` (Debian's own client, given a sources list, package lists and a cache of its own
under the cache directory: the system's sources and lists are neither used nor changed) into
``~/.cache/mailbox-actors-tests/notmuch`` (``$XDG_CACHE_HOME`` honoured), once per machine, and
checks the tarball against its pinned sha256. A machine without apt-get (or with no way to the
archive) fails the tests that need it with an error saying how to put the tarball there by hand: it
is a missing part, never a skip.

From each message only Message-ID, In-Reply-To and References are read, with the project's own
lenient parser (``core.inbound.parse``), and turned into threading keys as the mailbox does
(``core.inbound.threads.thread_keys``); a message is named by its file in the corpus
(``lkml/cur/1382298793.002253:2,``). The archive order is the order of the messages' Date
headers (then their file names).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from mailbox_actors.core.inbound.limits import InboundLimits
from mailbox_actors.core.inbound.parse import parse_message
from mailbox_actors.core.inbound.threads import thread_keys
from thread_corpus import Mail, jwz

__all__ = ["CASES", "CASES_THREADS", "CORPORA", "REAL_CHAIN", "REAL_THREAD", "SHA256", "TARBALL", "cache_dir",
           "in_reply_to_only", "jwz_with_copies", "messages", "pick", "tarball"]

PACKAGE = "notmuch=0.37-1"  # the version in Debian 12 (bookworm)
TARBALL = "notmuch_0.37.orig.tar.xz"
SHA256 = "0e766df28b78bf4eb8235626ab1f52f04f1e366649325a8ce8d3c908602786f6"
_TOP = "notmuch-0.37/test/corpora/"
CORPORA = ("lkml", "default")  # mailing-list archives
CASES = "threading"  # notmuch's threading cases
# The threads notmuch's own tests expect of its threading cases (test/T510-thread-replies.sh:
# "reply to ghost", "reply to ghost (RT)", "trusting reply-to"): each group one thread.
CASES_THREADS = frozenset({
    frozenset({"threading/ghost-root/real-root", "threading/ghost-root/child",
               "threading/ghost-root/fake-root", "threading/ghost-root/grand-child",
               "threading/ghost-root/grand-child2", "threading/ghost-root/great-grand-child"}),
    frozenset({"threading/ghost-root/1529425589.M615261P21663.len:2,S",
               "threading/ghost-root/1532672447.R3166642290392477575.len:2,S",
               "threading/ghost-root/1532672447.R6968667928580738175.len:2,S"}),
    frozenset({"threading/parent-priority/cur/root", "threading/parent-priority/cur/child",
               "threading/parent-priority/cur/grand-child"}),
})
_SOURCES = """Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


# Five messages along one reply chain of the 100-message LKML thread "[PATCH 00/44] remove
# unnecessary semicolons" (November 2010): the cover letter, a maintainer's review of patch 44,
# and three replies further down the chain, the messages between them not delivered (a reader
# Cc'd on part of the thread). Mail clients cut References from the front, so the deepest two
# name neither the cover letter nor the review: before IN-11's merges, 90 of the 120 arrival
# orders split them.
REAL_CHAIN = tuple(f"lkml/cur/1382298793.{n}:2," for n in
                   ("002253", "002468", "002679", "003334", "003503"))
# A whole thread of the notmuch list, "Working with Maildir storage?" (November 2009): seven
# messages in three branches, each with its In-Reply-To and its full References.
REAL_THREAD = ("default/foo/new/03:2,", "default/new/04:2,", "default/foo/cur/08:2,",
               "default/foo/new/09:2,", "default/foo/baz/12:2,", "default/bar/new/22:2,",
               "default/cur/41:2,")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mailbox-actors-tests" / "notmuch"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _by_hand(where: Path) -> str:
    return (f"put Debian's {TARBALL} (sha256 {SHA256}) at {where}: `apt-get source "
            f"--download-only {PACKAGE}` with bookworm's deb-src, or "
            f"http://deb.debian.org/debian/pool/main/n/notmuch/{TARBALL}")


def _apt(args: list[str], cwd: Path, opts: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    done = subprocess.run(["apt-get", "-q", *opts, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"`apt-get {args[0]}` for the real-mail corpus failed "
                           f"({done.returncode}): {done.stderr.strip()[-600:]}")


def _download(path: Path) -> None:
    """``apt-get source --download-only`` in a directory of its own next to ``path``, with a
    sources list, package lists and a cache of its own there (of the system's apt state only the
    keyring is read, nothing is written); the tarball is then moved to ``path``, whole."""
    if shutil.which("apt-get") is None:
        raise RuntimeError("the real-mail threading tests need Debian's apt-get to fetch the "
                           "notmuch source package's test corpora; " + _by_hand(path))
    work = path.parent / "download"
    shutil.rmtree(work, ignore_errors=True)
    for sub in ("etc", "lists/partial", "cache/archives/partial"):
        (work / sub).mkdir(parents=True)
    (work / "etc" / "notmuch-src.sources").write_text(_SOURCES)
    opts = ["-o", "Dir::Etc::SourceList=/dev/null",
            "-o", f"Dir::Etc::SourceParts={work / 'etc'}",
            "-o", f"Dir::State::Lists={work / 'lists'}",
            "-o", f"Dir::Cache={work / 'cache'}"]
    if os.geteuid() == 0:
        opts += ["-o", "APT::Sandbox::User=root"]  # apt's own user cannot reach a home's cache
    try:
        _apt(["update"], work, opts)
        _apt(["source", "--download-only", PACKAGE], work, opts)
        if not (work / TARBALL).exists():
            raise RuntimeError(f"apt-get source left no {TARBALL}; " + _by_hand(path))
        os.replace(work / TARBALL, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def tarball() -> Path:
    """The notmuch source tarball, downloaded on first use and checked against its sha256."""
    path = cache_dir() / TARBALL
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download at a time on this machine
        if path.exists() and _sha256(path) != SHA256:
            path.unlink()  # not the pinned tarball (put there by hand, or damaged): fetch it
        if not path.exists():
            _download(path)
        got = _sha256(path)
        if got != SHA256:
            path.unlink()
            raise RuntimeError(f"apt-get source gave a {TARBALL} of sha256 {got}, not the pinned "
                               f"{SHA256} (removed); " + _by_hand(path))
    return path


@functools.cache
def _read() -> dict[str, tuple[Mail, ...]]:
    lim = InboundLimits()
    found: dict[str, list[tuple[int, str, Mail]]] = {c: [] for c in (*CORPORA, CASES)}
    with tarfile.open(tarball()) as tar:
        for member in tar:
            if not (member.isfile() and member.name.startswith(_TOP)):
                continue
            name = member.name[len(_TOP):]
            corpus = name.split("/", 1)[0]
            if corpus not in found:
                continue
            source = tar.extractfile(member)
            assert source is not None
            p = parse_message(source.read(), lim)
            # As the mailbox reads them (objects/identity_mailbox/inbound.store).
            keys = thread_keys(f"<{p.message_id}>" if p.message_id else None, p.in_reply_to,
                               p.references)
            found[corpus].append((p.date_ms or 0, name,
                                  Mail(name, keys.own, keys.in_reply_to, keys.references,
                                       subject=name)))
    return {c: tuple(m for _, _, m in sorted(rows, key=lambda r: r[:2]))
            for c, rows in found.items()}


def messages(corpus: str) -> list[Mail]:
    """The corpus's messages in archive order, as threading reads them."""
    return list(_read()[corpus])


def pick(names: tuple[str, ...]) -> list[Mail]:
    """The messages with these names (``lkml/cur/...``: their files in the corpora), in archive
    order."""
    wanted = set(names)
    out = [m for c in (*CORPORA, CASES) for m in messages(c) if m.name in wanted]
    missing = wanted - {m.name for m in out}
    assert not missing, f"not in the corpora: {sorted(missing)}"
    return out


def in_reply_to_only(mails: list[Mail]) -> list[Mail]:
    """The same mail as a client that writes In-Reply-To and no References would send it."""
    return [Mail(m.name, m.message_id, m.in_reply_to, subject=m.subject) for m in mails]


def jwz_with_copies(archive: list[Mail]) -> set[frozenset[str]]:
    """JWZ's threads (``thread_corpus.jwz``) of the archive, a message delivered more than once
    counted as one: a copy (a later message with a Message-ID already seen, as a message that
    reached the archive by two lists) joins the thread of the first. JWZ's description leaves a
    repeated Message-ID to the implementer (step 1A gives the copy a container of its own, which
    makes a difference only for a copy of a thread's first message); mail readers, notmuch among
    them, show one message in one thread."""
    first: dict[str, str] = {}
    originals: list[Mail] = []
    copies: dict[str, str] = {}  # copy's name -> its first's name
    for m in archive:
        if m.message_id is not None and m.message_id in first:
            copies[m.name] = first[m.message_id]
            continue
        if m.message_id is not None:
            first[m.message_id] = m.name
        originals.append(m)
    threads = jwz(originals)
    where = {name: n for n, t in enumerate(threads) for name in t}
    grown = [set(t) for t in threads]
    for copy, original in copies.items():
        grown[where[original]].add(copy)
    return {frozenset(t) for t in grown}
