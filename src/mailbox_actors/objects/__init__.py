"""The platform's objects, each an actor class with its own namespace."""

from mailbox_actors.objects.domain_monitor import DomainMonitor
from mailbox_actors.objects.identity_mailbox import IdentityMailbox
from mailbox_actors.objects.tenant_quota import TenantQuota

__all__ = ["DEFAULT_OBJECTS", "DomainMonitor", "IdentityMailbox", "TenantQuota"]

DEFAULT_OBJECTS = (IdentityMailbox, DomainMonitor, TenantQuota)
