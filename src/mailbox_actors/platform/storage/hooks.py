"""What an actor's storage tells the code around it, passed in when the file is opened: alarm changes
(to the node's alarm scheduler, AL-1, AL-4) and transaction boundaries (to the request being
served: its deadline, RPC-5, and the implicit transactions its writes joined, RT-4)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["AlarmSink", "NoAlarmSink", "NoTransactionHooks", "TransactionHooks"]


class AlarmSink(Protocol):
    """Where an actor's alarm changes go besides its own file (the node's alarm scheduler)."""

    def before_commit(self, at_ms: int) -> None:
        """Called inside the transaction that sets the alarm, before it commits."""

    def committed(self, at_ms: int | None) -> None:
        """Called after a commit that changed the alarm, with the committed value."""


class NoAlarmSink:
    """Where alarm changes go when nobody schedules them (a storage opened alone)."""

    def before_commit(self, at_ms: int) -> None:
        pass

    def committed(self, at_ms: int | None) -> None:
        pass


class TransactionHooks(Protocol):
    """The request being served, as the storage sees it."""

    def before_transaction(self) -> None:
        """Called before a transaction (explicit or implicit) opens: may raise (deadline passed)."""

    def joined_implicit(self, generation: int) -> None:
        """A write of the current request went into implicit transaction ``generation``."""


class NoTransactionHooks:
    """A storage opened alone: no request around it."""

    def before_transaction(self) -> None:
        pass

    def joined_implicit(self, generation: int) -> None:
        pass
