"""A PostgreSQL connection string as it may be shown: host, port, database and user, never the
password (CL-7: a DSN that does not connect is named, its secret is not)."""

from __future__ import annotations

import re

__all__ = ["redact", "strip_secret"]

_SHOWN = ("host", "hostaddr", "port", "dbname", "user")


def redact(dsn: str) -> str:
    """``host=... port=... dbname=... user=...`` of ``dsn`` (a key=value string or a URI); a
    string psycopg cannot parse is shown as ``(unparsable connection string)``."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return "(unparsable connection string)"
    shown = " ".join(f"{k}={parts[k]}" for k in _SHOWN if parts.get(k) not in (None, ""))
    return shown or "(defaults of libpq)"


def strip_secret(text: str, dsn: str) -> str:
    """``text`` (a driver's error message) with the DSN's password, if any, replaced by ``***``."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:
        password = None
        m = re.search(r"password=(\S+)|://[^:/@]*:([^@]*)@", dsn)
        if m:
            password = m.group(1) or m.group(2)
    if password:
        text = text.replace(str(password), "***")
    return text
