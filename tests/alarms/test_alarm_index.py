"""The node's alarm index file (AL-4): one batch of lazy changes (alarms moved later, new ones,
deleted ones) is stored whole, and a batch the file cannot take leaves the index as it was."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mailbox_actors.alarms.index import AlarmIndex

NS = "scratch"


def test_one_batch_of_moves_puts_and_deletes_is_what_the_index_holds(tmp_path: Path) -> None:
    """AL-4: after ``apply``, a reopened index holds every put (new or moved) and none of the
    deleted keys; keys the batch did not name are untouched."""
    path = tmp_path / "alarms.sqlite"
    index = AlarmIndex(path)
    index.apply({(NS, "a"): 100, (NS, "b"): 200, (NS, "c"): 300})
    index.apply({(NS, "a"): 150, (NS, "b"): None, (NS, "d"): 400, (NS, "gone"): None})
    index.close()
    again = AlarmIndex(path)
    try:
        assert again.load() == {(NS, "a"): 150, (NS, "c"): 300, (NS, "d"): 400}
    finally:
        again.close()


def test_a_batch_the_file_refuses_changes_nothing(tmp_path: Path) -> None:
    """AL-4, OPS-3: a batch that fails part-way (here a key without a namespace, which the
    file's NOT NULL refuses, after a delete and a move were made) is rolled back whole, so the
    index never holds half of a flush; the book tries the changes again later."""
    path = tmp_path / "alarms.sqlite"
    index = AlarmIndex(path)
    try:
        index.apply({(NS, "a"): 100, (NS, "b"): 200})
        with pytest.raises(sqlite3.IntegrityError):
            index.apply({(NS, "b"): None, (NS, "a"): 150,
                         (None, "z"): 5})  # type: ignore[dict-item]
        assert index.load() == {(NS, "a"): 100, (NS, "b"): 200}
    finally:
        index.close()
