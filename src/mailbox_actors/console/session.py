"""Who may use the console (UI-4): the operator token, compared in constant time, opens a session
held in an HttpOnly, SameSite=Strict cookie; every action carries a CSRF token bound to that
session. Both are MACs under a key derived from the operator token, so nothing is stored and a
changed operator token ends every session. The cookie never holds the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["COOKIE", "CSRF_FIELD", "Sessions"]

COOKIE = "ma_console"
CSRF_FIELD = "csrf"


class Sessions:
    """``Sessions(operator_token)``: mint and check session cookies and their CSRF tokens."""

    def __init__(self, operator_token: str) -> None:
        self._token = operator_token.encode()
        self._key = hmac.new(self._token, b"mailbox-actors console session v1",
                             hashlib.sha256).digest()

    def token_ok(self, given: str) -> bool:
        """``given`` is the operator token (constant time)."""
        return hmac.compare_digest(given.strip().encode(), self._token)

    def _mac(self, purpose: bytes, value: str) -> str:
        return hmac.new(self._key, purpose + b"\0" + value.encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._mac(b'session', nonce)}"

    def session_ok(self, cookie: str | None) -> bool:
        if not cookie or "." not in cookie:
            return False
        nonce, _, mac = cookie.partition(".")
        return hmac.compare_digest(mac.encode(), self._mac(b"session", nonce).encode())

    def csrf_for(self, cookie: str) -> str:
        """The CSRF token of the session ``cookie`` (put in every form it serves)."""
        return self._mac(b"csrf", cookie.partition(".")[0])

    def csrf_ok(self, cookie: str | None, given: str | None) -> bool:
        if not self.session_ok(cookie) or not given:
            return False
        assert cookie is not None
        return hmac.compare_digest(given.encode(), self.csrf_for(cookie).encode())
