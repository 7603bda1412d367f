"""How Carrier finds an Email by its id and a Message by its id with no index of either id
(CA-1, CA-9, CA-10, CA-13): the Messages' own key, (email id, position), serves both lookups.

An Email's row is keyed by an integer ``seq`` (its rowid, appended in order); each of its
Messages carries that ``seq``. An Email is found by its id through its first Message (every
Email has one at position 0: submit takes at least one recipient). A Message's ``msg_`` id is
minted right after its Email's ``eml_`` id, so within one millisecond its ULID is the Email's
plus 1 to 50: such a Message is found by a range of the Messages' key (the Emails whose ULID
lies just below its own). The few minted across a millisecond (and every Message stored before
this layout) are listed in ``email_message_ids``. A submit so writes five b-trees where it wrote
seven: the Email's id index and the Message id's index are gone.

A ``seq`` names one Email for the file's life: Emails are deleted only by ``erase``, after which
the mailbox answers nothing, so SQLite never hands a deleted Email's rowid to another.
"""

from __future__ import annotations

import re
from typing import Any

from mailbox_actors.core.ulid import MAX_RANDOM, encode_ulid, ulid_int
from mailbox_actors.platform.storage.sql import SqlStorage

__all__ = ["NEAR", "derived", "find_message",
           "minted_value", "ulid_value"]



# How far above its Email's ULID a Message's may be and still be found without a listing: the
# most Messages an Email has (50), with room.
NEAR = 64
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
# Near its Email first (a range of the Messages' key), then the listing.
_FIND = ("SELECT message_id, email_id, status FROM email_messages WHERE email_id >= ? AND "
         "email_id <= ? AND message_id = ?3 UNION ALL SELECT m.message_id, m.email_id, m.status "
         "FROM email_message_ids x JOIN email_messages m ON m.email_id = x.email_id AND "
         "m.position = x.position WHERE x.message_id = ?3 LIMIT 1")


def ulid_value(prefixed: str) -> int | None:
    """The 128-bit value of a ``{prefix}_{ULID}`` id, or None when it is not one."""
    text = prefixed[4:] if prefixed[3:4] == "_" else ""
    if len(text) != 26 or not _ULID.fullmatch(text):
        return None
    return ulid_int(text)


def minted_value(prefixed: str) -> int:
    """``ulid_value`` of an id ``new_id`` just minted (a canonical ULID: no check needed)."""
    return ulid_int(prefixed[4:])


def derived(email_value: int, message_id: str) -> bool:
    """A Message id minted near its Email's (``find_message`` finds it by the Messages' key);
    ``email_value`` is the Email id's ``ulid_value``. Ids from ``new_id`` are canonical ULIDs."""
    return 0 < minted_value(message_id) - email_value <= NEAR


def _email_id(value: int) -> str:
    value = max(0, value)
    return "eml_" + encode_ulid(value >> 80, value & MAX_RANDOM)


def find_message(sql: SqlStorage, message_id: str) -> tuple[str, str, str] | None:
    """(message id, email id, status) of the Message ``message_id`` names, or None."""
    value = ulid_value(message_id)
    if value is None or not message_id.startswith("msg_"):
        low = high = ""  # not minted here: only the listing could hold it (it does not)
    else:
        low, high = _email_id(value - NEAR), _email_id(value - 1)
    rows: list[Any] = sql.exec(_FIND, low, high, message_id).all()
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None

