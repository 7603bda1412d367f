"""What one Carrier instance knows of its committed wake (CA-1, CA-15), so a
``submit`` behind another need not read the purposes again to know the wake is there.

``known`` is a time the committed wake is at or before: a later wake is then already covered.
It is learnt only after a submit's transaction committed, never while a dispatch run is going (the
runtime clears or re-arms the purpose when the run ends), and forgotten when a run starts and
ends. Everything else only moves the wake earlier, which keeps ``known`` true. A new instance (a
restart, an eviction) knows nothing and reads.

This leans on the runtime's contract ``CLEARED_WITHOUT_AWAIT`` (``runtime/purposes.py``): between the
dispatch method's return (``run_ended``) and the purpose being cleared or re-armed there is no await,
so no submit can commit and learn a wake that the clearing then removes.
tests/runtime/test_purpose_contract.py fails when that window gains an await.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mailbox_actors.carrier.host import CarrierHost

__all__ = ["DispatchWake"]


class DispatchWake:
    __slots__ = ("known", "running")

    def __init__(self) -> None:
        self.known: int | None = None
        self.running = False

    def ensure(self, host: CarrierHost, at: int) -> int:
        """Inside the transaction: a wake at or before ``at``; returns its time."""
        if self.known is not None and self.known <= at:
            return self.known
        return host.wake(at)

    def committed(self, at: int) -> None:
        """The transaction that ensured a wake at ``at`` committed."""
        if not self.running:
            self.known = at

    def run_started(self) -> None:
        self.running, self.known = True, None

    def run_ended(self) -> None:
        self.running, self.known = False, None
