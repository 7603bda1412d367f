"""DNS resolution for DomainMonitor (DM-1): the ``Resolver`` protocol, the real one, a fake.

Import from the modules.
"""

__all__: list[str] = []
