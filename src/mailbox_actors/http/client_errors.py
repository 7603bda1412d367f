"""What the HTTP client pool raises when it gets no answer (``HttpTransportError`` and its kinds):
each says whether the request may have reached the server, so a caller retries only where safe."""

from __future__ import annotations

__all__ = ["HttpConnectError", "HttpConnectionLost", "HttpProtocolError", "HttpTimeout",
           "HttpTlsError", "HttpTransportError"]


class HttpTransportError(ConnectionError):
    """No HTTP answer was obtained. ``request_sent``: the server may have received the request."""

    def __init__(self, message: str, *, base_url: str, request_sent: bool) -> None:
        super().__init__(message)
        self.base_url = base_url
        self.request_sent = request_sent


class HttpConnectError(HttpTransportError):
    """The connection could not be opened (refused, unreachable, connect timeout): nothing sent."""


class HttpTlsError(HttpConnectError):
    """The TLS handshake failed. ``certificate``: because the server's certificate was not
    accepted (not trusted, or not for this host); else for another reason (no common protocol,
    a server that does not speak TLS)."""

    def __init__(self, message: str, *, base_url: str, certificate: bool) -> None:
        super().__init__(message, base_url=base_url, request_sent=False)
        self.certificate = certificate


class HttpConnectionLost(HttpTransportError):
    """The connection closed or failed before the whole answer arrived."""


class HttpProtocolError(HttpTransportError):
    """The server's answer was not valid HTTP/1.1 (or was over the response size cap)."""


class HttpTimeout(HttpTransportError, TimeoutError):
    """``timeout_s`` passed before the whole answer arrived."""
