"""DomainMonitor (OBJ-3): one sending domain's DNS checks; one module per concern beside ``actor``."""

from mailbox_actors.objects.domain_monitor.actor import DomainMonitor

__all__ = ["DomainMonitor"]
