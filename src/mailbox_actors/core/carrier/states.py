"""Receipt statuses (CA-3) and Message statuses (CA-9, CA-13): which moves exist.

An Email is ``queued`` or ``refused`` when submitted. Dispatch intent moves it to ``dispatching``;
the transport's answer ends it ``provider_accepted``, ``rejected`` or ``outcome_unknown``, or (a
temporary rejection with budget left) returns it to ``queued``. Before intent it can end
``expired`` or ``superseded``. An operator settles ``outcome_unknown`` as accepted or rejected
(CA-12). A Message's delivery state only moves forward (CA-13).
"""

from __future__ import annotations

import enum

__all__ = ["CONTENT_KEEPING", "COUNTED_BY_CAP", "DELIVERY_RANK", "EmailStatus", "MessageStatus",
           "TERMINAL", "TRANSITIONS", "can_move", "delivery_moves", "is_terminal"]


class EmailStatus(enum.StrEnum):
    QUEUED = "queued"
    DISPATCHING = "dispatching"
    PROVIDER_ACCEPTED = "provider_accepted"
    OUTCOME_UNKNOWN = "outcome_unknown"
    REJECTED = "rejected"
    REFUSED = "refused"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"


S = EmailStatus
# from -> the statuses it may move to. ``queued -> queued`` is a temporary rejection put back.
TRANSITIONS: dict[EmailStatus, frozenset[EmailStatus]] = {
    S.QUEUED: frozenset({S.DISPATCHING, S.EXPIRED, S.SUPERSEDED}),
    S.DISPATCHING: frozenset({S.PROVIDER_ACCEPTED, S.REJECTED, S.OUTCOME_UNKNOWN, S.QUEUED}),
    S.OUTCOME_UNKNOWN: frozenset({S.PROVIDER_ACCEPTED, S.REJECTED}),  # resolve, by an operator
    S.PROVIDER_ACCEPTED: frozenset(),
    S.REJECTED: frozenset(),
    S.REFUSED: frozenset(),
    S.EXPIRED: frozenset(),
    S.SUPERSEDED: frozenset(),
}
# Only these hold content: everything else will never be sent again (outcome_unknown included:
# it is never retried automatically), so its stored content is dropped (CA-3).
CONTENT_KEEPING = frozenset({S.QUEUED, S.DISPATCHING})
TERMINAL = frozenset(s for s in EmailStatus if s not in CONTENT_KEEPING)
# Emails that reached (or may have reached) the provider count toward the cap (CA-6).
COUNTED_BY_CAP = frozenset({S.QUEUED, S.DISPATCHING, S.PROVIDER_ACCEPTED, S.OUTCOME_UNKNOWN})


def can_move(frm: EmailStatus, to: EmailStatus) -> bool:
    return to in TRANSITIONS[frm]


def is_terminal(status: EmailStatus) -> bool:
    """No automatic step follows (outcome_unknown may still be settled by ``resolve``)."""
    return status in TERMINAL


class MessageStatus(enum.StrEnum):
    QUEUED = "queued"  # its Email has not been answered by the provider yet
    NOT_SENT = "not_sent"  # its Email ended without reaching the provider
    REFUSED = "refused"  # refused alone at RCPT TO (code says why)
    UNKNOWN = "unknown"  # its Email's outcome is unknown
    UNCONFIRMED = "unconfirmed"  # the provider accepted the Email as a whole; no delivery news
    DEFERRED = "deferred"
    BOUNCED_SOFT = "bounced_soft"
    DELIVERED = "delivered"
    BOUNCED_HARD = "bounced_hard"
    COMPLAINED = "complained"


M = MessageStatus
# Forward order of delivery news (CA-13): a lower rank never replaces a higher one; rank 3 is
# terminal (delivered, bounced hard, complained).
DELIVERY_RANK: dict[MessageStatus, int] = {
    M.UNCONFIRMED: 0, M.UNKNOWN: 0, M.DEFERRED: 1, M.BOUNCED_SOFT: 2,
    M.DELIVERED: 3, M.BOUNCED_HARD: 3, M.COMPLAINED: 3,
}


def delivery_moves(current: MessageStatus, news: MessageStatus) -> bool:
    """Whether delivery news ``news`` changes a Message now at ``current``."""
    have = DELIVERY_RANK.get(current)
    if have is None or news not in DELIVERY_RANK or DELIVERY_RANK[news] == 0:
        return False
    if have == 3:
        return False  # terminal
    return DELIVERY_RANK[news] > have
