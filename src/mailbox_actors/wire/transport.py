"""What a mail transport is given and what it answers (CA-5, CA-8, CA-11).

A transport makes one provider attempt for one Email and answers exactly one outcome. These are
wire types because a dispatcher outside the actor reports them through
``record_transport_outcome`` too. An outcome carries codes and positions, never addresses.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["EMAIL_ID_HEADER", "OutboundEmail", "OutcomeUnknown", "ProviderAccepted", "ProviderRejected",
           "RecipientRefusal", "RejectionClass", "TransportOutcome", "Unreachable"]

RejectionClass = Literal["temporary", "permanent"]

# The header every transport stamps with the Email's id (CA-17): a provider that rewrites the
# Message-ID keeps it, so the journal copy names the Email it is a copy of.
EMAIL_ID_HEADER = "X-Mailbox-Actors-Email-Id"


class OutboundEmail(msgspec.Struct, frozen=True, kw_only=True):
    """One Email as a transport sends it. Recipients are in submission order: to, cc, bcc; a
    refusal names a recipient by its position in that order."""

    email_id: str
    message_id_header: str  # the stable Message-ID stamped at submit (CA-12), "<...@...>"
    from_: str = msgspec.field(name="from")
    to: list[str] = []
    cc: list[str] = []
    bcc: list[str] = []
    subject: str = ""
    text: str | None = None
    html: str | None = None
    headers: dict[str, str] = {}

    @property
    def recipients(self) -> list[str]:
        return [*self.to, *self.cc, *self.bcc]


class RecipientRefusal(msgspec.Struct, frozen=True):
    """One recipient refused alone (an SMTP RCPT TO refusal, CA-11)."""

    index: int  # position in ``OutboundEmail.recipients``
    code: str  # e.g. "550 5.1.1" for SMTP
    klass: RejectionClass = msgspec.field(name="class")


class ProviderAccepted(msgspec.Struct, frozen=True, tag="provider_accepted", tag_field="kind"):
    """An aggregate acknowledgment: not proof that any recipient was accepted or delivered. The
    recipients refused one by one before the body went are listed."""

    provider_message_id: str
    refused: list[RecipientRefusal] = []


class ProviderRejected(msgspec.Struct, frozen=True, tag="provider_rejected", tag_field="kind"):
    """A documented refusal of the whole request before acceptance. ``refused`` lists per-recipient
    refusals when every recipient was refused one by one (so nothing was sent)."""

    code: str
    klass: RejectionClass = msgspec.field(name="class")
    refused: list[RecipientRefusal] = []


class OutcomeUnknown(msgspec.Struct, frozen=True, tag="outcome_unknown", tag_field="kind"):
    """Acceptance is uncertain (the body went and no final reply came; an undocumented error)."""

    reason: str = ""  # a short code such as "no_final_reply", never content


class Unreachable(msgspec.Struct, frozen=True, tag="unreachable", tag_field="kind"):
    """The provider could not have received the message (CA-16): the connection was refused, the
    name did not resolve, TLS failed, or it timed out or dropped before any recipient was
    accepted. Not a rejection: the Email waits and is tried again; ``attempts`` is unchanged."""

    failure: str = "connect_failed"  # a short code such as "dns_failed", never content


TransportOutcome = ProviderAccepted | ProviderRejected | OutcomeUnknown | Unreachable
