"""The fence in an actor's file (CL-10, CL-11): the slot epoch stamped into ``_ma_meta``.

On many machines an actor's file may be reached by a new slot holder while an old one still runs
(a paused process, a partition). Every transaction of a fenced storage, right after its BEGIN,
asks the lease and reads the file's data version, which opens the transaction's own snapshot
(WAL: a commit by another connection after that snapshot makes this one's write fail). When
another connection committed to the file since the last look, or this one rolled back or wiped,
it reads the epoch stamped in the file in that snapshot (``Transactions._fenced``), and:

- refuses when the lease no longer lets the slot be served (``unavailable`` naming slot and
  epoch): the monotonic lease deadline passed;
- at the first write after activation, stamps the lease's epoch over an older one or none;
  a file stamped with a newer epoch than the lease is refused (``internal_error``, logged),
  never downgraded;
- at a later write, refuses when the file carries a newer epoch than its own (another machine
  took the slot and wrote): ``unavailable``, and the host resets the actor.

The file is read only when it may have changed under the actor: a transaction first reads the
file's data version (``PRAGMA data_version``, which moves when another connection commits to the
file, never for this connection's own commits); while it is where the last look found the lease's
epoch stamped, and this connection undid nothing since, the stamp still stands and the fence only
asks the lease (``Transactions._fenced``).

Outside machine mode a storage has no fence and pays one attribute test per transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mailbox_actors.platform.logging import get_logger
from mailbox_actors.platform.services import ServiceKey
from mailbox_actors.platform.storage.connection import RUNTIME_TOKEN, ScreenedConnection
from mailbox_actors.wire.errors import PlatformError, PlatformErrorKind

__all__ = ["DATA_VERSION", "EPOCH_KEY", "SLOT_FENCE", "EpochFence", "LeaseView", "StaleEpoch"]

EPOCH_KEY = "slot_epoch"  # in _ma_meta
_READ = f"SELECT v FROM _ma_meta WHERE k = 'slot_epoch' /*{RUNTIME_TOKEN}*/"
# Read by the transaction on its own connection (``Transactions._fenced``), in its snapshot.
DATA_VERSION = f"PRAGMA data_version /*{RUNTIME_TOKEN}*/"
_STAMP = f"INSERT OR REPLACE INTO _ma_meta (k, v) VALUES ('slot_epoch', ?) /*{RUNTIME_TOKEN}*/"


_log = get_logger("mailbox_actors.storage")


def _always() -> bool:
    return True


class LeaseView(Protocol):
    """The slot lease as the fence sees it (``cluster.leases.SlotLease``)."""

    slot: int
    epoch: int

    def serving(self) -> bool:
        """The monotonic lease deadline lies ahead (and the lease was not lost)."""
        ...


class StaleEpoch(PlatformError):
    """A newer holder of the slot wrote this actor's file: this activation must go."""

    def __init__(self, slot: int, epoch: int, stored: int) -> None:
        super().__init__(PlatformErrorKind.UNAVAILABLE, "slot_fence", "stale_epoch",
                         f"slot {slot} moved on: this machine's epoch {epoch} is older than the "
                         f"file's {stored}", details={"slot": slot, "epoch": epoch})


class EpochFence:
    """One slot's fence, shared by every actor storage of the slot's node."""

    __slots__ = ("checks", "lease", "serving")

    def __init__(self, lease: LeaseView, *, checks: bool = True) -> None:
        """``checks=False`` (tests only: the fault test's run without the fence): the lease is
        still there for actors to read (``lease.epoch``), but nothing is stamped, compared or
        refused."""
        self.lease = lease
        self.checks = checks
        # What a transaction asks when the file's stamp still stands (``Transactions._fenced``):
        # the lease's own ``serving``, one call; ``serve`` refuses when it answers False.
        self.serving: Callable[[], bool] = lease.serving if checks else _always

    def serve(self) -> None:
        """Refuse (``unavailable``, naming slot and epoch) unless the lease lets the slot be
        served now: its monotonic deadline lies ahead and it was not lost. Every transaction
        asks, whether or not it reads the file (``check``)."""
        lease = self.lease
        if self.checks and not lease.serving():
            raise PlatformError(
                PlatformErrorKind.UNAVAILABLE, "slot_fence", "lease_lost",
                f"slot {lease.slot} is not served here now (lease epoch {lease.epoch} expired "
                "or lost)", details={"slot": lease.slot, "epoch": lease.epoch})

    def check(self, tx: ScreenedConnection, first: bool) -> None:
        """Called by the transaction (``transactions.Transactions``) on its own connection right
        after BEGIN, when the file may have changed since it last looked; ``first``: no
        transaction of this activation passed the fence yet. Raises to refuse the transaction
        (the caller rolls the BEGIN back)."""
        self.serve()
        if not self.checks:
            return
        lease = self.lease
        # Straight to the connection, as the runtime (``_sys_mode``): never through the screening
        # of texts unknown to the file's schema, whose authorizer swap would expire every
        # prepared statement of the connection at each transaction.
        row = tx._sys_screened(_READ, ()).fetchone()
        stored = int(row[0]) if row is not None else 0
        epoch = lease.epoch
        if stored == epoch:
            return
        if stored > epoch:
            if first:
                _log.error("actor_file_newer_than_lease", slot=lease.slot, epoch=epoch,
                           file_epoch=stored)
                raise PlatformError(
                    PlatformErrorKind.CORRUPT, "slot_fence", "newer_epoch",
                    f"the actor's file is stamped with epoch {stored}, newer than this "
                    f"machine's lease of slot {lease.slot} (epoch {epoch}): refused, not "
                    "downgraded", details={"slot": lease.slot, "epoch": epoch,
                                           "file_epoch": stored})
            raise StaleEpoch(lease.slot, epoch, stored)
        tx._sys_screened(_STAMP, (str(epoch),))


SLOT_FENCE: ServiceKey[EpochFence] = ServiceKey("slot_fence")
