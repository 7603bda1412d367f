"""A message's Date header in Unix milliseconds (IN-1): the standard library's reading, with the
form nearly every sender writes read directly.

``email.utils.parsedate_to_datetime`` tokenizes any RFC 5322 date (and the obsolete forms) in
Python; that is a tenth of a plain message's parse. A value in the canonical form
(``[Day, ]D Mon YYYY HH:MM[:SS] +HHMM``, single spaces) is read here by one regex and integer
arithmetic, with the same answer the standard library gives (tested equal over generated
values); anything else, an offset of ``-0000`` (which the standard library reads as local time)
included, goes to the standard library.
"""

from __future__ import annotations

import datetime
import email.utils
import re

from mailbox_actors.core.inbound.text import Defects

__all__ = ["date_ms"]

_MONTHS = {m: i for i, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
_CANONICAL = re.compile(
    r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), )?([0-9]{1,2}) ([A-Za-z]{3}) ([0-9]{4}) "
    r"([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))? ([+-])([01][0-9]|2[0-3])([0-5][0-9])\Z")
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()


def date_ms(value: str | None, d: Defects) -> int | None:
    """The date in Unix milliseconds; None (with ``date_invalid``) when it cannot be read, None
    when there is no Date header."""
    if value is None:
        return None
    m = _CANONICAL.match(value)
    if m is not None:
        day, mon, year, hh, mm, ss, sign, oh, om = m.groups()
        month = _MONTHS.get(mon.lower())
        offset = (int(oh) * 60 + int(om)) * 60
        if month is not None and int(year) >= 1000 and (offset or sign == "+"):
            try:
                days = datetime.date(int(year), month, int(day)).toordinal() - _EPOCH_ORDINAL
            except ValueError:
                pass  # a day the month does not have: the standard library says so below
            else:
                local = days * 86400 + int(hh) * 3600 + int(mm) * 60 + int(ss or 0)
                return (local - offset if sign == "+" else local + offset) * 1000
    try:
        return int(email.utils.parsedate_to_datetime(value).timestamp() * 1000)
    except Exception:
        d.add("date_invalid")
        return None
