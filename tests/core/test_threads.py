"""Threading rules (IN-2) as pure functions, on the hard cases: replies before their parents,
References without In-Reply-To, changed subjects, unrelated mail with one subject, full threads,
Outlook's Thread-Index, and thread ids that never change."""

from __future__ import annotations

import base64
import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from mailbox_actors.core.inbound.threads import (
    MAX_THREAD_SIZE,
    ThreadKeys,
    assign_thread,
    msg_ids,
    thread_keys,
)


class Store:
    """An in-memory ThreadLookup that applies decisions the way the mailbox does."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        self.of: dict[str, str] = {}  # message name -> thread id
        self._n = itertools.count(1)

    def thread_of(self, key: str) -> str | None:
        return self.keys.get(key)

    def size_of(self, thread_id: str) -> int:
        return self.sizes.get(thread_id, 0)

    def receive(self, name: str, keys: ThreadKeys) -> str:
        d = assign_thread(keys, self, f"thr_{next(self._n)}")
        if d.created:
            assert d.thread_id not in self.sizes
        self.sizes[d.thread_id] = self.sizes.get(d.thread_id, 0) + 1
        for k in d.map_if_absent:
            self.keys.setdefault(k, d.thread_id)
        for k in d.map_always:
            self.keys[k] = d.thread_id
        self.of[name] = d.thread_id
        return d.thread_id


def mail(own: str | None, irt: str | None = None, refs: tuple[str, ...] = (),
         ti: str | None = None) -> ThreadKeys:
    return thread_keys(f"<{own}>" if own else None, f"<{irt}>" if irt else None,
                       " ".join(f"<{r}>" for r in refs) or None, ti)


def test_msg_ids_reads_tokens_and_ignores_the_rest() -> None:
    """IN-2: Message-ID tokens are read from <...> in order, without repeats or comments."""
    assert msg_ids("<a@x> (comment) <b@x>\r\n <a@x>") == ["a@x", "b@x"]
    assert msg_ids("not an id") == []
    assert msg_ids(None) == []


def test_a_reply_joins_its_parent_by_in_reply_to_alone() -> None:
    """IN-2: In-Reply-To is trusted on its own (no References)."""
    s = Store()
    t = s.receive("a", mail("a@x"))
    assert s.receive("b", mail("b@x", irt="a@x")) == t


def test_references_without_in_reply_to_join_the_thread() -> None:
    """IN-2: References alone join the nearest known ancestor's thread."""
    s = Store()
    t = s.receive("a", mail("a@x"))
    assert s.receive("c", mail("c@x", refs=("a@x", "b@x"))) == t


def test_a_reply_that_arrives_before_its_parent_is_joined_when_the_parent_arrives() -> None:
    """IN-2: the parent, arriving late, joins the thread its reply started; so does a sibling."""
    s = Store()
    t = s.receive("c", mail("c@x", irt="b@x", refs=("a@x", "b@x")))
    assert s.receive("a", mail("a@x")) == t
    assert s.receive("b", mail("b@x", irt="a@x", refs=("a@x",))) == t
    assert s.receive("d", mail("d@x", irt="a@x")) == t


def test_grandchildren_in_any_order_end_in_one_thread() -> None:
    """IN-2: a chain whose messages arrive in every possible order threads into one thread
    whenever each message's References carry its whole ancestry."""
    chain = [mail(f"m{i}@x", irt=f"m{i - 1}@x" if i else None,
                  refs=tuple(f"m{j}@x" for j in range(i))) for i in range(5)]
    for order in itertools.permutations(range(5)):
        s = Store()
        threads = {s.receive(str(i), chain[i]) for i in order}
        assert len(threads) == 1, order


def test_a_changed_subject_on_a_reply_keeps_the_thread() -> None:
    """IN-2: the subject plays no part; a reply with a new subject stays in its parent's thread
    (the keys carry no subject at all)."""
    s = Store()
    t = s.receive("a", mail("a@x"))
    assert s.receive("b", mail("b@x", irt="a@x")) == t
    assert "subject" not in ThreadKeys.__struct_fields__


def test_the_same_subject_from_unrelated_senders_is_never_merged() -> None:
    """IN-2: messages without references to each other never share a thread, whatever their
    subject or sender."""
    s = Store()
    threads = {s.receive(str(i), mail(f"u{i}@x")) for i in range(20)}
    assert len(threads) == 20


def test_a_message_without_message_id_still_threads_by_its_parents() -> None:
    """IN-2: a missing Message-ID never prevents joining the parent's thread."""
    s = Store()
    t = s.receive("a", mail("a@x"))
    assert s.receive("b", mail(None, irt="a@x")) == t
    assert s.receive("c", mail(None)) != t


def test_a_thread_past_its_size_starts_a_new_thread_and_replies_follow() -> None:
    """IN-2: a thread holds at most 100 messages; the 101st starts a new thread, and replies to
    the 101st follow it there. Messages already threaded keep their thread."""
    s = Store()
    first = s.receive("m0", mail("m0@x"))
    for i in range(1, MAX_THREAD_SIZE):
        assert s.receive(f"m{i}", mail(f"m{i}@x", irt=f"m{i - 1}@x")) == first
    assert s.sizes[first] == MAX_THREAD_SIZE
    second = s.receive("m100", mail("m100@x", irt="m99@x"))
    assert second != first
    assert s.receive("m101", mail("m101@x", irt="m100@x")) == second
    assert all(s.of[f"m{i}"] == first for i in range(MAX_THREAD_SIZE))


def _thread_index(root: bytes, replies: int) -> str:
    return base64.b64encode(root + b"\x00\x01\x02\x03\x04" * replies).decode()


def _ti_root(value: str) -> str:
    return "ti:" + base64.b64encode(base64.b64decode(value)[:22]).decode()


def test_outlook_mail_with_only_thread_index_threads_by_its_root() -> None:
    """IN-2: Outlook-style mail with no In-Reply-To or References threads by the 22-byte root of
    Thread-Index; another conversation's root is another thread."""
    root = bytes(range(22))
    other = bytes(range(1, 23))
    s = Store()
    t = s.receive("o1", mail("o1@x", ti=_ti_root(_thread_index(root, 0))))
    assert s.receive("o2", mail("o2@x", ti=_ti_root(_thread_index(root, 1)))) == t
    assert s.receive("o3", mail(None, ti=_ti_root(_thread_index(root, 2)))) == t
    assert s.receive("p1", mail("p1@x", ti=_ti_root(_thread_index(other, 0)))) != t


def test_message_ids_win_over_thread_index() -> None:
    """IN-2: when References name a known message, its thread wins over the Thread-Index root."""
    s = Store()
    t1 = s.receive("a", mail("a@x"))
    t2 = s.receive("o", mail("o@x", ti=_ti_root(_thread_index(bytes(22), 0))))
    assert t1 != t2
    assert s.receive("b", mail("b@x", refs=("a@x",),
                               ti=_ti_root(_thread_index(bytes(22), 1)))) == t1


@settings(deadline=None, max_examples=200, derandomize=True)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=2, max_value=30))
def test_a_decision_never_moves_what_was_threaded(seed: int, n: int) -> None:
    """IN-2: whatever the arrival order and references, a message joins a brand-new thread or the
    thread one of its keys was mapped to; no key of a message already threaded is remapped but the
    message's own id, so thread ids never change once given; no thread exceeds 100 messages."""
    rnd = random.Random(seed)
    msgs = []
    for i in range(n):
        parents = [f"m{j}@x" for j in rnd.sample(range(n), k=rnd.randint(0, min(3, n)))
                   if j != i]
        msgs.append((f"m{i}", mail(f"m{i}@x", irt=parents[-1] if parents and rnd.random() < .7
                                   else None, refs=tuple(parents))))
    rnd.shuffle(msgs)
    s = Store()
    for name, keys in msgs:
        before = dict(s.keys)
        d = assign_thread(keys, s, "thr_new")
        mapped = {before.get(k) for k in (keys.own, keys.in_reply_to, *keys.references) if k}
        assert (d.created and d.thread_id == "thr_new") or d.thread_id in mapped
        assert set(d.map_always) <= {keys.own, keys.thread_index_root}
        assert all(k not in before for k in d.map_if_absent)
        s.receive(name, keys)
    assert max(s.sizes.values()) <= MAX_THREAD_SIZE
