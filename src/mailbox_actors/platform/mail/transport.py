"""The ``Transport`` protocol (CA-8): one provider attempt for one Email, exactly one outcome.

Credentials and provider configuration belong to the transport, never to ``submit``. A transport
never raises for a provider's answer: it maps every answer to a ``TransportOutcome`` (an exception
escaping ``send`` is treated as ``outcome_unknown`` by the caller, since the body may have gone).
"""

from __future__ import annotations

from typing import Protocol

from mailbox_actors.platform.services import ServiceKey
from mailbox_actors.wire.transport import OutboundEmail, TransportOutcome

__all__ = ["MAIL_TRANSPORT", "Transport", "TransportClosed"]


class TransportClosed(RuntimeError):
    """``send`` after ``aclose``: a caller that keeps a closed transport has a bug."""


class Transport(Protocol):
    async def send(self, email: OutboundEmail) -> TransportOutcome:
        """Make one attempt; answer accepted, rejected (with its class) or unknown."""
        ...

    async def aclose(self) -> None:
        """Close pooled connections; the transport may not be used afterwards."""
        ...


# The node's transport, as objects ask for it (``ctx.service(MAIL_TRANSPORT)``); none: mail stays
# queued (CA-14's ``transport = none``).
MAIL_TRANSPORT: ServiceKey[Transport] = ServiceKey("mail_transport")
