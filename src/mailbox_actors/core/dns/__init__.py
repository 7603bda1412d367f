"""DNS verdicts for DomainMonitor (DM-2), pure: answers in, pass/fail/unknown with a diagnosis out.

``answers`` (what a resolver says), ``names`` (IDNA), ``checks`` (MX, DKIM, DMARC), ``spf`` (the
lookup-counting planner), ``lifecycle`` (states and hysteresis, DM-3). Import from the modules.
"""

__all__: list[str] = []
