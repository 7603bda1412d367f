"""Many machines (CL-6, CL-8..CL-17): slots, leases with fencing epochs in PostgreSQL, and the
machine process that serves the slots it holds (ADR 0019)."""

__all__: list[str] = []  # the modules are the interface: cluster.slots, leases, lease_table, machine
