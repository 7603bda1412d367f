"""IdentityMailbox (OBJ-1): one identity's mailbox; one module per concern beside ``actor``."""

from mailbox_actors.objects.identity_mailbox.actor import IdentityMailbox

__all__ = ["IdentityMailbox"]
