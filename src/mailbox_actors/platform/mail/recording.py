"""``RecordingTransport``: the scriptable fake beside the real transports (CA-8).

Tests queue the outcomes of the next calls (then a default answers), read every ``OutboundEmail``
it was given, and can hold a send until they release it, so a test decides exactly when a provider
"answers" relative to other work (a restart, a replay, a second dispatch) without sleeping.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import anyio

from mailbox_actors.platform.mail.transport import TransportClosed
from mailbox_actors.wire.transport import (
    OutboundEmail,
    ProviderAccepted,
    TransportOutcome,
)

__all__ = ["RecordingTransport", "TransportClosed"]


class _Hold:
    """One held send: ``entered`` is set once a send is waiting on it, ``released`` lets it go."""

    __slots__ = ("entered", "released")

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.released = anyio.Event()


class RecordingTransport:
    """A ``Transport`` that answers scripted outcomes and records what it was asked to send.

    ``outcomes`` answer the calls in order (``queue`` adds more); once they are spent ``default``
    answers (an acceptance with id ``rec-<n>`` when none is given). An exception in the script is
    raised instead of answering (what a transport that breaks its promise looks like to a caller).
    """

    def __init__(self, outcomes: Iterable[TransportOutcome | BaseException] = (), *,
                 default: TransportOutcome | None = None) -> None:
        self._script: deque[TransportOutcome | BaseException] = deque(outcomes)
        self._default = default
        self._hold: _Hold | None = None
        self.sent: list[OutboundEmail] = []  # every email given to ``send``, in call order
        self._sent_changed = anyio.Event()
        self.closed = False

    @property
    def calls(self) -> int:
        return len(self.sent)

    def queue(self, *outcomes: TransportOutcome | BaseException) -> None:
        """Answer the next calls with these, after those already queued."""
        self._script.extend(outcomes)

    async def wait_sent(self, n: int) -> None:
        """Return once ``send`` has been called ``n`` times (answered or still held)."""
        while len(self.sent) < n:
            await self._sent_changed.wait()

    def hold(self) -> None:
        """Make the next send (and every send after it, until ``release``) wait inside ``send``:
        recorded as sent, not yet answered, as a provider that has the body and no reply yet."""
        if self._hold is None:
            self._hold = _Hold()

    async def wait_entered(self) -> None:
        """Return once a send is waiting on the current hold (``hold`` must have been called)."""
        if self._hold is None:
            raise RuntimeError("wait_entered without hold()")
        await self._hold.entered.wait()

    def release(self) -> None:
        """Let every held send answer; later sends answer at once."""
        if self._hold is not None:
            self._hold.released.set()
            self._hold = None

    async def send(self, email: OutboundEmail) -> TransportOutcome:
        if self.closed:
            raise TransportClosed("RecordingTransport.send after aclose")
        self.sent.append(email)
        self._sent_changed.set()
        self._sent_changed = anyio.Event()
        # The outcome is taken when the call arrives, so calls answer in arrival order even when a
        # hold releases them together.
        outcome = self._script.popleft() if self._script else self._default_outcome()
        hold = self._hold
        if hold is not None:
            hold.entered.set()
            await hold.released.wait()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def aclose(self) -> None:
        self.closed = True
        self.release()

    def _default_outcome(self) -> TransportOutcome:
        if self._default is not None:
            return self._default
        return ProviderAccepted(provider_message_id=f"rec-{len(self.sent)}")
