"""Search figures (PERF, SPEC section 12; IN-10): ``search_messages`` over 10,000 messages in one
IdentityMailbox, p50 and p99 through the node's in-process RPC path.

The mailbox is filled by ``ingest`` (so the FTS5 index is built as it is in use, one message per
transaction) with seeded synthetic mail: a subject and a dozen lines drawn from a 3,000-word
vocabulary, every tenth with an attachment. The queries go round a fixed mix: a word in every
message, a mid-frequency word, a rare one, a phrase, a prefix, a column filter, and a word with a
sender and a received-range filter; each answers its first page (20, newest first).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from mailbox_actors.bench.figures import Figure, Goal, Progress, Sizes, figure, percentile
from mailbox_actors.node import Node
from mailbox_actors.runtime.settings import RuntimeSettings
from mailbox_actors.wire.inbound import Ingest
from mailbox_actors.wire.mailbox import MailboxInit
from mailbox_actors.wire.search import SearchFilters, SearchMessages

__all__ = ["SEARCH_FIGURES", "search_figures"]

SEARCH_FIGURES = ("search_messages_p50_ms", "search_messages_p99_ms")
MESSAGES = 10_000
SAMPLES = 350
_TENANT, _IDENTITY = "ten_bench", "idn_bench"


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(3000)]


def _letter(n: int, rng: random.Random, words: list[str]) -> bytes:
    # Zipf-like: low indexes far more often, so common, middling and rare words all exist.
    def word() -> str:
        return words[min(len(words) - 1, int(rng.paretovariate(1.1)) - 1)]

    subject = f"report {n} about " + " ".join(word() for _ in range(3))
    body = "\r\n".join(" ".join(word() for _ in range(10)) for _ in range(12))
    sender = f"sender{n % 50}@example.com"
    head = (f"From: <{sender}>\r\nTo: owner@example.com\r\nSubject: {subject}\r\n"
            f"Message-ID: <search-{n}@example.com>\r\n")
    if n % 10:
        return (head + "\r\n" + body + "\r\n").encode()
    return (head + 'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
            f"--b\r\nContent-Type: text/plain\r\n\r\n{body}\r\n--b\r\n"
            "Content-Type: application/pdf\r\nContent-Disposition: attachment; "
            'filename="a.pdf"\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERi0=\r\n--b--\r\n'
            ).encode()


async def search_figures(work: Path, sizes: Sizes, progress: Progress, _want: frozenset[str],
                         _errors: list[str]) -> list[Figure]:
    rng = random.Random(20261206)
    words = _vocabulary(rng)
    settings = RuntimeSettings(data_dir=str(work / "search-node"))
    async with Node(settings) as node:
        mid = node.id_from_name("identity_mailbox", "search-bench")
        await node.call("identity_mailbox", mid, MailboxInit(), tenant_id=_TENANT, identity_id=_IDENTITY)
        t_first = node.clock.now_ms()
        for n in range(MESSAGES):
            if n % 2000 == 0:
                progress.say(f"search: ingesting message {n}/{MESSAGES}")
            await node.call("identity_mailbox", mid,
                            Ingest(source_id=f"s{n}", raw=_letter(n, rng, words)),
                            tenant_id=_TENANT, identity_id=_IDENTITY)
        t_mid = (t_first + node.clock.now_ms()) // 2
        queries = [
            SearchMessages(query="report"),  # every message
            SearchMessages(query=words[40]),  # middling
            SearchMessages(query=words[2500]),  # rare
            SearchMessages(query=f'"{words[0]} {words[1]}"'),  # a phrase
            SearchMessages(query=words[3][:3] + "*"),  # a prefix
            SearchMessages(query=f"subject:{words[5]}"),  # a column
            SearchMessages(query=words[10], filters=SearchFilters(
                from_="sender7@example.com", received_after_ms=t_mid)),
        ]
        progress.say(f"search: {SAMPLES} queries over {MESSAGES} messages")
        for q in queries:  # each query's statements prepared once, as in steady use
            await node.call("identity_mailbox", mid, q, tenant_id=_TENANT, identity_id=_IDENTITY)
        times: list[float] = []
        for i in range(SAMPLES):
            q = queries[i % len(queries)]
            t0 = time.perf_counter()
            await node.call("identity_mailbox", mid, q, tenant_id=_TENANT, identity_id=_IDENTITY)
            times.append((time.perf_counter() - t0) * 1000)
    note = (f"{SAMPLES} searches over {MESSAGES} messages in one mailbox (7 kinds: common, "
            "middling and rare word, phrase, prefix, column, word with sender and date filters); "
            "first page of 20, in-process RPC path")
    return [figure("search_messages_p50_ms", percentile(times, 50), "ms",
                   goal=Goal(kind="below", bound=20)),
            figure("search_messages_p99_ms", percentile(times, 99), "ms",
                   goal=Goal(kind="below", bound=20), note=note)]
