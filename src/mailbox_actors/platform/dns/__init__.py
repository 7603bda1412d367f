"""DNS resolution for DomainMonitor (DM-1): the ``Resolver`` protocol and its ``RESOLVER`` key
(``resolver``), the real one on dnspython (``real``), a scriptable fake (``fake``).

Import from the modules.
"""

__all__: list[str] = []
