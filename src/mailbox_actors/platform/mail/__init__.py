"""Mail I/O: outbound transports (SMTP, Cloudflare-style HTTP, a recording fake) and inbound parsing.

Import from the modules.
"""

__all__: list[str] = []
