"""The pure decisions in mailbox_actors.core: ULID parts, object ids, backoff, alarm purposes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailbox_actors.core.actor_ids import (
    NAMESPACE_RE,
    check_id,
    id_from_name,
    id_from_random,
    namespace_key,
)
from mailbox_actors.core.alarm_purposes import (
    alarm_after_schedule,
    due_purposes,
    earliest,
    meta_key,
)
from mailbox_actors.core.backoff import (
    ALARM_MAX_RETRIES,
    alarm_retry_delay_ms,
    exponential_delay_ms,
)
from mailbox_actors.core.ulid import (
    MAX_RANDOM,
    encode_ulid,
    next_in_millisecond,
    next_ulid_parts,
    ulid_int,
)

# Hypothesis' per-example deadline is a timing assertion; tests here assert behaviour only.
no_deadline = settings(deadline=None)

SECRET = b"test-id-secret-0123456789abcdef"
MAILBOX = namespace_key("identity_mailbox", SECRET)
DOMAIN = namespace_key("domain_monitor", SECRET)
T0 = 1_767_225_600_000
R1 = bytes(range(10))


# -- ulid ---------------------------------------------------------------------------------------


def test_ulid_first_id_uses_time_and_randomness() -> None:
    """With no previous id, the parts are the current millisecond and the fresh random bits
    (RT-12)."""
    assert next_ulid_parts(None, T0, R1) == (T0, int.from_bytes(R1, "big"))


def test_ulid_same_millisecond_increments_random_part() -> None:
    """Within one millisecond the next id adds one to the 80-bit random part (RT-12)."""
    assert next_ulid_parts((T0, 41), T0, b"\xff" * 10) == (T0, 42)


def test_ulid_clock_going_back_keeps_the_last_millisecond() -> None:
    """A clock that steps back never makes ids go backwards (RT-12)."""
    assert next_ulid_parts((T0, 7), T0 - 5, R1) == (T0, 8)


def test_ulid_text_is_the_canonical_crockford_form() -> None:
    """An id's text is the ULID's canonical 26-character Crockford base-32 form, as the ulid
    package prints it, at the edges and in between, so ids sort by time then randomness (RT-12)."""
    from ulid import ULID

    cases = [(0, 0), ((1 << 48) - 1, MAX_RANDOM), (T0, int.from_bytes(R1, "big")), (T0, 1),
             (1, MAX_RANDOM), (T0 + 1, 0)]
    for ms, rand in cases:
        expected = str(ULID.from_bytes(ms.to_bytes(6, "big") + rand.to_bytes(10, "big")))
        assert encode_ulid(ms, rand) == expected
    texts = [encode_ulid(ms, rand) for ms, rand in sorted(cases)]
    assert texts == sorted(texts) and all(len(t) == 26 for t in texts)
    # Seeded values across the range, each millisecond asked twice (the kept time text) and
    # after another (the kept text replaced).
    rng = random.Random(12)
    for _ in range(2000):
        ms, rand = rng.randrange(1 << 48), rng.randrange(1 << 80)
        expected = str(ULID.from_bytes(ms.to_bytes(6, "big") + rand.to_bytes(10, "big")))
        assert encode_ulid(ms, rand) == expected
        assert encode_ulid(ms, rand ^ 1)[:10] == expected[:10]


def test_ulid_overflow_moves_to_next_millisecond() -> None:
    """When the random part is exhausted the id moves to the next millisecond (RT-12)."""
    assert next_ulid_parts((T0, MAX_RANDOM), T0, R1) == (T0 + 1, int.from_bytes(R1, "big"))


def test_ulid_later_millisecond_takes_fresh_randomness() -> None:
    """Once the clock passes the last id's millisecond, the random part is fresh (RT-12)."""
    assert next_ulid_parts((T0, 5), T0 + 1, b"\x00" * 10) == (T0 + 1, 0)


@no_deadline
@given(
    steps=st.lists(
        st.tuples(st.integers(min_value=-3, max_value=3), st.binary(min_size=10, max_size=10)),
        min_size=1,
        max_size=50,
    )
)
def test_ulid_parts_strictly_increase(steps: list[tuple[int, bytes]]) -> None:
    """Whatever the clock does, successive (time, random) pairs strictly increase (RT-12)."""
    last: tuple[int, int] | None = None
    now = T0
    for delta, rand in steps:
        now = max(0, now + delta)
        nxt = next_ulid_parts(last, now, rand)
        if last is not None:
            assert nxt > last
        last = nxt


def test_ulid_rejects_bad_inputs() -> None:
    """Out-of-range time and random bytes of the wrong length are refused."""
    with pytest.raises(ValueError):
        next_ulid_parts(None, -1, R1)
    with pytest.raises(ValueError):
        next_ulid_parts(None, 1 << 48, R1)
    with pytest.raises(ValueError):
        next_ulid_parts(None, T0, b"short")


def test_a_ulid_text_reads_back_as_the_value_it_was_written_from() -> None:
    """RT-12: ``ulid_int`` of ``encode_ulid``'s text is time << 80 | random, at the edges and
    between (Carrier finds a Message by how far its id's value lies above its Email's)."""
    for time_ms, rand in ((0, 0), (T0, 41), (T0, MAX_RANDOM), ((1 << 48) - 1, 1 << 79)):
        assert ulid_int(encode_ulid(time_ms, rand)) == time_ms << 80 | rand


def test_ulid_needs_randomness_only_for_a_new_millisecond() -> None:
    """RT-12: within the last id's millisecond (or a clock gone back) the next id is the last
    plus one, with no randomness drawn; a later millisecond or a full random part needs fresh
    bytes (None: ask next_ulid_parts). Ids minted so strictly increase and draw once per ms."""
    assert next_in_millisecond(None, T0) is None
    assert next_in_millisecond((T0, 41), T0) == (T0, 42)
    assert next_in_millisecond((T0, 41), T0 - 3) == (T0, 42)
    assert next_in_millisecond((T0, 41), T0 + 1) is None
    assert next_in_millisecond((T0, MAX_RANDOM), T0) is None

    class CountingRng:
        draws = 0

        def random_bytes(self, n: int) -> bytes:
            self.draws += 1
            return bytes(range(n))

        def random(self) -> float:
            return 0.5

    from mailbox_actors.platform.clock import FakeClock
    from mailbox_actors.platform.ids import Ids

    clock, rng = FakeClock(T0), CountingRng()
    ids = Ids(clock, rng)
    minted = [ids.new_id("evt") for _ in range(3)]
    assert rng.draws == 1
    clock.set_ms(T0 + 5)
    minted += [ids.new_id("evt") for _ in range(2)]
    assert rng.draws == 2
    assert minted == sorted(minted) and len(set(minted)) == 5


# -- actor ids ----------------------------------------------------------------------------------


def test_id_from_name_is_deterministic() -> None:
    """The same namespace and name always give the same 64-hex-digit id (RT-1)."""
    a = id_from_name(MAILBOX, "idn_alice")
    assert a == id_from_name(MAILBOX, "idn_alice")
    assert len(a) == 64
    assert a == a.lower()
    assert check_id(MAILBOX, a) is None


def test_ids_are_the_ones_files_on_disk_were_named_by() -> None:
    """A namespace's key and its ids never change from one version to the next: every actor's
    file is named by its id (RT-1). Values computed by the code of session 13."""
    key = namespace_key("identity_mailbox", b"secret-0123456789abcdef")
    assert key.hex() == "c566180e53a97a675206daf1d09ae62d70290e2ffd901530c1967f71348f57ec"
    assert id_from_name(key, "idn_alice") == (
        "351d2562b85f06030489f1e50aa122343b94e1b8c5578e82ac463e827a97ff17")
    assert id_from_random(key, bytes(range(16))) == (
        "000102030405060708090a0b0c0d0e0f38198fd468f9188799437bf6c2b78774")


def test_id_from_name_differs_by_name_and_namespace() -> None:
    """Different names, or the same name in another namespace, give different ids (RT-1)."""
    assert id_from_name(MAILBOX, "a") != id_from_name(MAILBOX, "b")
    assert id_from_name(MAILBOX, "a") != id_from_name(DOMAIN, "a")


def test_namespace_key_depends_on_secret_and_namespace() -> None:
    """Each namespace, and each secret, gets its own key (RT-1)."""
    assert namespace_key("identity_mailbox", SECRET) != namespace_key("domain_monitor", SECRET)
    assert namespace_key("identity_mailbox", SECRET) != namespace_key("identity_mailbox", b"other")


def test_unique_ids_are_valid_and_distinct() -> None:
    """Ids from different random bytes are distinct and accepted by their namespace (RT-1)."""
    a = id_from_random(MAILBOX, b"\x01" * 16)
    b = id_from_random(MAILBOX, b"\x02" * 16)
    assert a != b
    assert check_id(MAILBOX, a) is None
    assert check_id(MAILBOX, b) is None
    with pytest.raises(ValueError):
        id_from_random(MAILBOX, b"\x01" * 15)


def test_id_of_one_namespace_is_refused_by_another() -> None:
    """An id minted for one namespace does not authenticate in another (RT-1)."""
    for oid in (id_from_name(MAILBOX, "x"), id_from_random(MAILBOX, b"\x07" * 16)):
        assert check_id(DOMAIN, oid) == "object id does not belong to this namespace"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "0" * 63,
        "0" * 65,
        "../" + "0" * 61,
        "0" * 32 + "/../../etc/passwd",
        "0" * 63 + "\x00",
        "\x00" * 64,
        "g" * 64,
        " " + "0" * 63,
        "\n" + "0" * 63,
    ],
    ids=repr,
)
def test_malformed_ids_are_refused(bad: str) -> None:
    """Anything that is not 64 lowercase hex digits, including ``../`` and NUL, is refused
    (RT-1, REL-2)."""
    assert check_id(MAILBOX, bad) == "object id must be 64 lowercase hex digits"


def test_valid_id_with_trailing_newline_is_refused() -> None:
    """A valid id followed by a newline is not an id: no path is built from it (RT-1, REL-2)."""
    oid = id_from_name(MAILBOX, "x")
    assert check_id(MAILBOX, oid + "\n") is not None


def test_uppercase_id_is_refused() -> None:
    """The upper-case spelling of a valid id is refused: ids have one spelling (RT-1)."""
    oid = id_from_name(MAILBOX, "x")
    assert check_id(MAILBOX, oid.upper()) == "object id must be 64 lowercase hex digits"


@pytest.mark.parametrize("bad", [None, 42, b"0" * 64, ["0" * 64]], ids=repr)
def test_non_string_ids_are_refused(bad: object) -> None:
    """A value that is not a string is refused, never coerced (RT-1)."""
    assert check_id(MAILBOX, bad) == "object id must be a string"


def test_tampered_id_is_refused() -> None:
    """Changing one hex digit of a valid id makes it invalid (RT-1)."""
    oid = id_from_name(MAILBOX, "x")
    flipped = ("1" if oid[0] != "1" else "2") + oid[1:]
    assert check_id(MAILBOX, flipped) == "object id does not belong to this namespace"


@no_deadline
@given(st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
def test_random_hex_strings_are_refused(s: str) -> None:
    """A random 64-hex-digit string does not authenticate (RT-1)."""
    assert check_id(MAILBOX, s) == "object id does not belong to this namespace"


def test_namespace_names() -> None:
    """Namespace names are short snake_case identifiers, so they are safe in paths (RT-1)."""
    assert NAMESPACE_RE.match("identity_mailbox")
    for bad in ("", "Identity", "1abc", "a-b", "../x", "a\x00"):
        assert not NAMESPACE_RE.match(bad)


# -- backoff ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("retry", "base_s"), [(1, 2), (2, 4), (3, 8), (4, 16), (5, 32), (6, 64)])
def test_alarm_retry_delays_double_from_two_seconds(retry: int, base_s: int) -> None:
    """Alarm retries wait 2, 4, 8, 16, 32, 64 s plus up to 25% jitter (AL-3)."""
    base_ms = base_s * 1000
    assert alarm_retry_delay_ms(retry, 0.0) == base_ms
    assert alarm_retry_delay_ms(retry, 0.5) == base_ms + base_ms // 8
    top = alarm_retry_delay_ms(retry, 0.999999)
    assert top is not None
    assert base_ms <= top < base_ms * 1.25


@no_deadline
@given(retry=st.integers(min_value=1, max_value=6), u=st.floats(min_value=0.0, max_value=1.0,
                                                                  exclude_max=True))
def test_alarm_retry_jitter_stays_within_a_quarter(retry: int, u: float) -> None:
    """Whatever the random draw, the jitter adds between 0 and 25% of the delay (AL-3)."""
    base_ms = 2000 * 2 ** (retry - 1)
    delay = alarm_retry_delay_ms(retry, u)
    assert delay is not None
    assert base_ms <= delay <= base_ms * 1.25


def test_alarm_retries_end_after_six() -> None:
    """After the sixth retry the alarm is abandoned: no delay is given (AL-3)."""
    assert ALARM_MAX_RETRIES == 6
    assert alarm_retry_delay_ms(7, 0.0) is None
    assert alarm_retry_delay_ms(100, 0.5) is None


def test_backoff_rejects_bad_inputs() -> None:
    """Retry numbers are 1-based and the random draw must be in [0, 1)."""
    with pytest.raises(ValueError):
        alarm_retry_delay_ms(0, 0.0)
    with pytest.raises(ValueError):
        exponential_delay_ms(1, 100, 1000, 0.25, 1.0)
    with pytest.raises(ValueError):
        exponential_delay_ms(1, 100, 1000, 0.25, -0.1)


def test_exponential_delay_is_capped() -> None:
    """The doubling stops at the cap, before jitter, however many attempts there were."""
    assert exponential_delay_ms(10, 100, 1000, 0.0, 0.0) == 1000
    assert exponential_delay_ms(10_000, 100, 1000, 0.0, 0.0) == 1000
    assert exponential_delay_ms(10, 100, 1000, 0.5, 0.5) == 1250


# -- alarm purposes -----------------------------------------------------------------------------


def test_meta_key_names_the_purpose() -> None:
    """A purpose is stored under ``alarm:{purpose}`` in meta (AL-2)."""
    assert meta_key("outbox") == "alarm:outbox"
    assert meta_key("maintenance") == "alarm:maintenance"


@pytest.mark.parametrize("bad", ["", "Outbox", "out box", "../x", "a:b", "x" * 33, "1st"])
def test_meta_key_refuses_bad_purposes(bad: str) -> None:
    """Purpose names are short snake_case words, never free text (AL-2)."""
    with pytest.raises(ValueError):
        meta_key(bad)


def test_schedule_lowers_the_alarm_but_never_raises_it() -> None:
    """Scheduling a purpose moves the alarm earlier, never later (AL-2)."""
    assert alarm_after_schedule(None, T0) == T0
    assert alarm_after_schedule(T0, T0 - 1) == T0 - 1
    assert alarm_after_schedule(T0, T0 + 1) == T0
    assert alarm_after_schedule(T0, T0) == T0


def test_due_purposes_in_time_order_with_ties_by_name() -> None:
    """Due purposes run earliest first, ties broken by name; future ones wait (AL-2)."""
    pending = {"outbox": T0, "check": T0, "claim": T0 - 10, "maintenance": T0 + 1}
    assert due_purposes(pending, T0) == ["claim", "check", "outbox"]
    assert due_purposes(pending, T0 - 11) == []
    assert due_purposes({}, T0) == []


def test_earliest_pending_purpose_rearms_the_alarm() -> None:
    """After a run, the alarm is re-armed to the earliest purpose still pending, or none (AL-2)."""
    assert earliest({"outbox": T0 + 5, "maintenance": T0 + 86_400_000}) == T0 + 5
    assert earliest({}) is None
