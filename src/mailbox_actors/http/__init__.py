"""HTTP/1.1 for the node and its callers: the server (httptools) and the client's connection pool.

Knows nothing of actors or envelopes, so the host-service client imports it without the runtime.
Import from the modules (``server``, ``client``).
"""

__all__: list[str] = []
