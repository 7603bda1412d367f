"""How the console shows and checks values (UI-4, CA-10): ids and cursors it passes on, a
redacted cell, times relative to now."""

from __future__ import annotations

import pytest

from mailbox_actors.console.app import _cell, _size
from mailbox_actors.console.cluster_view import check_id, ms_ago
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError


def test_ids_and_cursors_are_checked_before_they_travel() -> None:
    """UI-4: an id, a namespace or a cursor a page hands on matches its pattern, or the request
    is invalid_request naming the field (no path separator, quote or space gets through)."""
    assert check_id("object_id", "a" * 64, "object") == "a" * 64
    assert check_id("identity_id", "idn_01M950DMRSDF0K6J2AV68DJ18Q") == \
        "idn_01M950DMRSDF0K6J2AV68DJ18Q"
    assert check_id("cursor", "eyJhIjoxfQ.abc-_=+/", "cursor")
    for field, value, kind in (("object_id", "A" * 64, "object"), ("object_id", "a" * 63, "object"),
                               ("identity_id", "../etc", "record"), ("identity_id", "", "record"),
                               ("identity_id", "x" * 65, "record"), ("cursor", "a b", "cursor"),
                               ("namespace", "Identity", "namespace"), ("queue", "a/b", "queue"),
                               ("cursor", "x'--", "cursor")):
        with pytest.raises(MailboxActorsError) as e:
            check_id(field, value, kind)
        assert e.value.code is ErrorCode.INVALID_REQUEST
        assert e.value.details == {"field": field}


def test_a_redacted_value_shows_its_type_and_size_only() -> None:
    """CA-10: a table cell or KV value the node redacted shows as its type and size; others as
    JSON, cut at 200 characters."""
    assert _cell({"kind": "redacted", "type": "text", "bytes": 42}) == "(text, 42 B, hidden)"
    assert _cell(None) == "null"
    assert _cell("queued") == "queued"
    assert _cell([1, "a"]) == '[1,"a"]'
    assert _cell("x" * 500).endswith("…") and len(_cell("x" * 500)) == 201
    assert (_size(None), _size(512), _size(16384), _size(3 << 20)) == ("-", "512 B", "16.0 KB",
                                                                        "3.0 MB")


def test_times_are_shown_relative_to_now() -> None:
    """UI-4: times read as "12 s ago" / "in the future" at a glance; none is a dash."""
    now = 1_800_000_000_000
    assert ms_ago(now, None) == "-"
    assert ms_ago(now, now - 12_000) == "12 s ago"
    assert ms_ago(now, now + 300_000) == "5 min from now"
    assert ms_ago(now, now - 3 * 3_600_000) == "3 h ago"
    assert ms_ago(now, now - 10 * 86_400_000).endswith("UTC")
