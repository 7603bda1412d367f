"""The errors an actor's storage raises (RT-5, RT-7, REL-4), each an error code of SPEC section 5."""

from __future__ import annotations

from mailbox_actors.wire.errors import (
    ErrorCode,
    MailboxActorsError,
    PlatformError,
    PlatformErrorKind,
    platform_code,
)

__all__ = ["StatementRefused", "StorageBusy", "StorageCorrupt", "StorageUnavailable",
           "StorageWriteFailed", "TransactionRolledBack"]


class StatementRefused(MailboxActorsError):
    """User SQL tried something only the runtime may do (RT-5)."""

    def __init__(self, reason: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, f"SQL statement refused: {reason}",
                         details={"refused": reason})


class StorageCorrupt(PlatformError):
    """The actor's file is not a usable database (REL-4): that actor fails alone."""

    def __init__(self, detail: str) -> None:
        super().__init__(PlatformErrorKind.CORRUPT, "actor_storage", detail,
                         "the actor's storage file is unreadable", details={"storage": detail})


class StorageWriteFailed(PlatformError):
    """The disk is full (or failing) (OPS-3): this write was not stored; reads still work. Unlike
    ``limit_exceeded`` (the actor's own size limit) it is retryable: space can come back."""

    def __init__(self, detail: str) -> None:
        super().__init__(PlatformErrorKind.UNAVAILABLE, "actor_storage", detail,
                         "the actor's storage cannot be written now (the disk is full or "
                         "failing); nothing of this write was stored", details={"storage": detail})


class TransactionRolledBack(MailboxActorsError):
    """SQLite ended a whole transaction itself (disk full, ``OR ROLLBACK``, ``RAISE(ROLLBACK)``):
    nothing of it was stored, whatever the code went on to do."""

    def __init__(self, cause: BaseException | None) -> None:
        code = (cause.code if isinstance(cause, MailboxActorsError)
                else platform_code(PlatformErrorKind.INTERNAL))
        why = cause.message if isinstance(cause, MailboxActorsError) else type(cause).__name__
        super().__init__(code, f"SQLite rolled the whole transaction back ({why}); none of its "
                               "writes were stored", details={"rolled_back": True})


class StorageUnavailable(PlatformError):
    """The file exists but cannot be opened now (no file descriptors left, permissions): retry."""

    def __init__(self, detail: str) -> None:
        super().__init__(PlatformErrorKind.UNAVAILABLE, "actor_storage", detail,
                         "the actor's storage cannot be opened now", details={"storage": detail})


class StorageBusy(PlatformError):
    """A statement from a task outside the actor's open ``ctx.transaction`` (RT-16): another
    request or alarm run of the actor, already under way when that transaction began. Joined to
    it, a write would be answered as stored and then undone with it if it rolled back, and a read
    would answer with what it has not committed; refused, the statement does not run (nothing of
    it is stored) and the caller retries (``unavailable``)."""

    def __init__(self) -> None:
        super().__init__(PlatformErrorKind.UNAVAILABLE, "actor_storage", "transaction_open",
                         "another request's transaction is open on this actor; this statement "
                         "did not run and nothing of it was stored",
                         details={"storage": "transaction_open"})
